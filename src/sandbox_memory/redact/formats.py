"""Secret formats, one row each: where a new secret format is added (data, not code).

A row says what a secret looks like and how it is found:

* ``prefix`` + ``pattern``: a vendor token, its fixed prefix at a token start, then its body
  (``Format("npm-token", prefix="npm_", pattern=r"[A-Za-z0-9]{36,}")``); ``prefix_rx`` is
  such a prefix written as a regex (``gh[pousr]_``);
* ``pattern`` alone: a regular expression; a group named ``secret`` is the secret (else the
  whole match), a group named ``head`` inside a lookbehind moves its start left;
* ``form="vendor-assignment"``: ``<vendor>..._token = <value>`` (``vendor``, or ``prefix`` when
  the vendor's name starts a token), ``pattern`` the value;
* ``form="command-flag"``: the argument after one of ``flags`` on a command line of one of
  ``tools`` (alternations);
* ``form="command"``: the argument right after ``pattern`` (a command's fixed shape).

Then, all optional: ``priority`` (which kind a marker gets when rules overlap: ``vendor-first``,
``vendor``, ``vendor-last``, ``context``, ``header``, ``entropy``), ``validate`` (a check of the
secret's text, by name: `rules._VALIDATORS`), ``kind_of`` (a kind chosen by the match),
``lowered`` (the pattern is lowercase and runs on the lowercased text), ``extend`` (grow the end
over token characters), ``extend_left_digits``, ``gate`` (words one of which the text must hold
for the row to run; by default the pattern's literal start), ``prefilter`` (for a pattern with
no literal start: a Hyperscan regex every match contains).

``secret``: texts the redactor must change, and the secret in each gone; ``kept``: texts it
must leave as they are. ``tests/test_secret_format_table.py`` runs every row's examples.
`rules.py` compiles the rows; the values are synthetic (no real secret)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    """One secret format (see the module's docstring for the fields)."""

    kind: str
    pattern: str = ""
    prefix: str = ""
    prefix_rx: str = ""
    form: str = "token"
    vendor: str = ""
    tools: str = ""
    flags: str = ""
    priority: str = "vendor"
    validate: str = ""
    kind_of: str = ""
    lowered: bool = False
    extend: bool = False
    extend_left_digits: bool = False
    gate: tuple[str, ...] = ()
    prefilter: str = ""
    secret: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()


FORMS = ("token", "vendor-assignment", "command-flag", "command")
PRIORITIES = ("vendor-first", "vendor", "vendor-last", "context", "header", "entropy")


SECRET_FILE = (
    r"(?:master\.key|credentials\.key|[\w.-]*vault[_-]?pass[\w.-]*|\.pgpass|\.netrc|"
    r"[\w.-]*(?:secret|password|passwd|token|apikey|api_key)s?(?:\.txt)?|[\w-]+\.key)"
)
"""A file that holds a secret and nothing else (Rails' ``master.key``, Ansible's
``.vault_pass.txt``, ``db_password.txt``, ``server.key``; ``.pub`` files are not among them)."""

TRUNCATED_PREFIXES = (
    r"gh[pousr]_", "github_pat_", "glpat-", r"xox[bpae]-", "sk-proj-", "sk-ant-", "sk_live_",
    "rk_live_", "npm_", "pypi-", "hf_", "dckr_pat_", "glsa_", "AKIA", "ASIA", "AIza", r"ya29\.",
    "shpat_", "sq0atp-",
)  # fmt: skip
"""Vendor prefixes after which a few characters cut short at the end of a text are the first
half of a token."""
_TRUNCATED = "(?:" + "|".join(TRUNCATED_PREFIXES) + ")"
_URL_VALUE = r"[^&\s#\"'<>\\]{1,4096}"
_AUTH_HEAD = (
    r"authorization(?:(?<![a-z0-9_]authorization)|(?<=\\[ntr]authorization))"
    r"(?:\\{0,3}[\"'])?[ \t]*[:=][ \t]*(?:\\{0,3}[\"'])?"
)
_PAIR = (
    r"(?:[ \t]+(?:is|are|as|with))?[ \t]*:?[ \t]+[\w.@-]{1,64}[ \t]*/[ \t]*"
    r"(?P<secret>[^\s/\"'`]{5,127}[^\s/\"'`.,;:)])"
)

FORMATS: tuple[Format, ...] = (
    Format(
        "age-secret-key",
        prefix="AGE-SECRET-KEY-1",
        pattern=r"[A-Z0-9]{50,}",
        secret=("AGE-SECRET-KEY-16KA1QQ468KUSQDCKLLR5XVP5DF2C65CGIJGA71HEEF30JH8LS9HZ",),
        kept=("AGE-SECRET-KEY-1docs",),
    ),
    # -- AI providers
    Format(
        "anthropic-api-key",
        prefix="sk-ant-",
        pattern=r"[a-z]{2,8}\d{2}-[A-Za-z0-9_-]{20,}",
        priority="vendor-first",
        secret=("sk-ant-fmw29-ME7wc3XCRBBr57ouI0pfpKh",),
        kept=("sk-ant-docs",),
    ),
    Format(
        "openrouter-api-key",
        prefix="sk-or-",
        pattern=r"v\d-[A-Za-z0-9]{32,}",
        priority="vendor-first",
        secret=("sk-or-v7-mmk3rgA7yTZL04al65LGf5zgnJg2o1CEWWi0",),
        kept=("sk-or-docs",),
    ),
    Format(
        "openai-api-key",
        prefix="sk-",
        pattern=r"(?!ant-|or-v\d-)(?=[A-Za-z0-9_-]{0,300}?\d)"
        r"(?:(?:proj|svcacct|admin|None)-)?[A-Za-z0-9_-]{20,}",
        secret=("sk-lXv8vJt8QH6O6DFCsE6J8ZOu8",),
        kept=("sk-docs",),
    ),
    Format(
        "huggingface-token",
        prefix="hf_",
        pattern=r"[A-Za-z0-9]{30,}",
        secret=("hf_V0BCqeJPys6wrIDNdJ9hk60H3uONlIPrv",),
        kept=("hf_docs",),
    ),
    Format(
        "huggingface-token",
        prefix="api_org_",
        pattern=r"[A-Za-z0-9]{30,}",
        secret=("api_org_64aUDzw0ikX4xmZdzLj0BHIcsz602DlDdyPi",),
        kept=("api_org_docs",),
    ),
    Format(
        "groq-api-key",
        prefix="gsk_",
        pattern=r"[A-Za-z0-9]{40,}",
        secret=("gsk_sNoIS3pf8udOvsZPPG0pnxT5btVKEnCISuLODd3M85lq",),
        kept=("gsk_docs",),
    ),
    Format(
        "xai-api-key",
        prefix="xai-",
        pattern=r"[A-Za-z0-9]{60,}",
        secret=("xai-m7UFY9Ink08hNMX91ERXSFxPOiYriwIWcfjIdmn5fVHMl8TglsFV8MsvKvev",),
        kept=("xai-docs",),
    ),
    Format(
        "replicate-token",
        prefix="r8_",
        pattern=r"[A-Za-z0-9]{30,}",
        secret=("r8_likhhYwm7lHf2XCNPDYWjJqUeByv88Hu1ag",),
        kept=("r8_docs",),
    ),
    Format(
        "perplexity-api-key",
        prefix="pplx-",
        pattern=r"[A-Za-z0-9]{40,}",
        secret=("pplx-ALHFngK59GG68J4V2W2UUPjtWlg6fv8qjJWZQxzATShvnX",),
        kept=("pplx-docs",),
    ),
    # -- code hosting, packages, dev tools
    Format(
        "github-token",
        prefix="github_pat_",
        pattern=r"[A-Za-z0-9_]{22,}",
        secret=("github_pat_9BCCI7CSPT4snsnJeY7pDkvqtDkJ",),
        kept=("github_pat_docs",),
    ),
    Format(
        "github-token",
        prefix_rx=r"gh[pousr]_",
        pattern=r"[A-Za-z0-9]{30,}",
        secret=("ghp_sU6NXFlpBZaNqI90LpO9IWwtuk8W4BcqW",),
    ),
    Format(
        "npm-token",
        prefix="npm_",
        pattern=r"[A-Za-z0-9]{36,}",
        secret=("npm_tHuQaw5YCcrvhSSQxj2jhBrBqp6VjcaleJAF",),
        kept=("npm_docs",),
    ),
    Format(
        "npm-token",
        pattern=r":_authToken=[ \t]*(?P<secret>[^\s\"'\\]{8,4096})",
        secret=(":_authToken=\t\tJSILCBvY",),
    ),
    Format(
        "atlassian-api-token",
        prefix_rx=r"AT[AC]TT3",
        pattern=r"[A-Za-z0-9_=-]{50,}",
        secret=("ATATT33S5W1I1vGnMGxJYPewvtxh4htN03alnsBAEe4kSQr20cmDOYxyZpT5",),
    ),
    Format(
        "postman-api-key",
        prefix="PMAK-",
        pattern=r"[A-Za-z0-9]{20,}-[A-Za-z0-9]{30,}",
        secret=("PMAK-ssTvisgnqXIL6SC9de7l2sMBgC-EI073EwRWecOgHdLfncYy8Kuxs30s5W",),
        kept=("PMAK-docs",),
    ),
    Format(
        "linear-api-key",
        prefix="lin_",
        pattern=r"(?:api|oauth)_[A-Za-z0-9]{32,}",
        secret=("lin_api_9DZqM89umIo6AZzwJqTDt5791yd9WmyMJNzlr1",),
        kept=("lin_docs",),
    ),
    Format(
        "notion-token",
        prefix="secret_",
        pattern=r"[A-Za-z0-9]{43}(?![A-Za-z0-9])",
        secret=("secret_S0KoIiUqToJ31251WsJQHTdwH5qqfuRtj41uPm1Gl0n",),
        kept=("secret_docs",),
    ),
    Format(
        "notion-token",
        prefix="ntn_",
        pattern=r"[A-Za-z0-9]{40,}",
        secret=("ntn_z0qKk6VR6LX1k0h7warge2udESFMNZ4jXq7j4FrqGbSrT",),
        kept=("ntn_docs",),
    ),
    Format(
        "grafana-token",
        prefix="glsa_",
        pattern=r"[A-Za-z0-9_-]{32,}",
        secret=("glsa_v2ptpwpmfT5BvAbXdDZdocyaFCFI28xM",),
        kept=("glsa_docs",),
    ),
    Format(
        "grafana-token",
        prefix="glc_",
        pattern=r"[A-Za-z0-9+/=_-]{32,}",
        secret=("glc_KSV0wJc7NlCsInt9cbjqsakXB3totEGBX2nW0",),
        kept=("glc_docs",),
    ),
    Format(
        "sentry-token",
        prefix_rx=r"sntry[su]_",
        pattern=r"[A-Za-z0-9+/=_-]{40,}",
        secret=("sntrys_UTyXHEv3RzFIpnLJFMVRg4wvDDuDzkVTrfK9TgYz",),
    ),
    Format(
        "pulumi-token",
        prefix="pul-",
        pattern=r"[a-f0-9]{40}(?![a-f0-9])",
        secret=("pul-04f61f803e1730427c0a688a67d1807eadab22cf",),
        kept=("pul-docs",),
    ),
    # -- chat, mail
    Format(
        "discord-bot-token",  # detect-secrets' format, with ASCII classes
        pattern=r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27}",
        extend=True,
        prefilter=r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27}",
        secret=("M84zi928lE7by1D5LF2VEw8jr.6TGpru.r3KP4RSRQZ7xeqlEarielWtcjFK",),
    ),
    Format(
        "slack-token",
        prefix_rx=r"xox[abposrecd]-",
        pattern=r"[A-Za-z0-9_%-]{10,}",
        secret=("xoxb-0utWr2LwAto",),
    ),
    Format(
        "discord-mfa-token",
        prefix="mfa.",
        pattern=r"[A-Za-z0-9_-]{80,}",
        secret=(
            "mfa.3E9GJUgdoI6K4EebTcWEwI0gfDOrZ7D5qSPvUqdWQD85Xy8PUhburXWYjY3aTF5OK4u5doN8D22F816h8G",
        ),
        kept=("mfa.docs",),
    ),
    Format(
        "slack-token",
        prefix="xapp-",
        pattern=r"\d-[A-Za-z0-9-]{20,}",
        secret=("xapp-6-aGAntnTnBw8vu2C7wXMTzUKq",),
        kept=("xapp-docs",),
    ),
    Format(
        "slack-webhook",
        pattern=r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{20,}",
        secret=("https://hooks.slack.com/triggers/3KLrmOv6upx1yvimSzB4eXnSZ8",),
    ),
    Format(
        "discord-webhook",
        pattern=r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/"
        r"(?P<secret>[A-Za-z0-9_-]{30,})",
        secret=("https://discordapp.com/api/webhooks/69325/uhZa9fJjMsjcGt4qzfZFOV3c01gvqj",),
    ),
    Format(
        "telegram-bot-token",
        pattern=r":(?<=(?P<head>[0-9]{8}):)[A-Za-z0-9_-]{30,40}(?![A-Za-z0-9_-])",
        extend_left_digits=True,
        prefilter=r"[0-9]{8}:[A-Za-z0-9_-]{30}",
        secret=("bot 7481920365:AAHx3kPq9ZrT2mW8vB5nL1cY4dF6gJ0sUeQ",),
        kept=("7481920365:short",),
    ),
    Format(
        "mailgun-api-key",
        prefix="key-",
        pattern=r"[0-9a-zA-Z]{32}(?![0-9A-Za-z])",
        secret=("key-ZcYUMzhVfzOhaa4hAecbChlUXVaFE5nF",),
        kept=("key-docs",),
    ),
    Format(
        "mailchimp-api-key",
        pattern=r"-us(?<=(?:(?<![0-9a-z])|(?<=\\[ntr]))(?P<head>[0-9a-z]{32})-us)\d{1,2}(?![0-9])",
        secret=("apikey 3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e-us14",),
        kept=("version 1.2-us14",),
    ),
    Format(
        "twilio-auth-token",
        pattern=r"AC[0-9a-f]{32}\\?[\"']?[ \t]*[,:][ \t]*\\?[\"']?(?P<secret>[0-9a-f]{32})(?![0-9a-f])",
        prefilter=r"AC[0-9a-f]{32}",
        secret=(
            "ACb77934f3025f5903ed457f5792304062\t\t\t\t  :\\'16cdd2b6b997d1a097f914a5390d4752",
        ),
    ),
    # -- payments, commerce
    Format(
        "stripe-key",
        pattern=r"k_(?:live|test)_(?<=(?:(?<![A-Za-z0-9_])|(?<=\\[ntr]))(?P<head>[rsp])k_(?:live|test)_)"
        r"[A-Za-z0-9]{10,}",
        secret=("STRIPE sk_test_4eC39HqLyjWDarjtT1zdp7dc",),
        kept=("sk_test_ is the prefix",),
    ),
    Format(
        "stripe-webhook-secret",
        prefix="whsec_",
        pattern=r"[A-Za-z0-9+/=]{24,}",
        secret=("whsec_ZL6yMWTR5InSHuyAoaXLWTDoE",),
        kept=("whsec_docs",),
    ),
    Format(
        "shopify-token",
        prefix_rx=r"shp(?:at|ss|ca|pa)_",
        pattern=r"[A-Za-z0-9]{20,}",
        secret=("shppa_Nj34IwfFT5F1VyxSzKCmDCxsM",),
    ),
    Format(
        "square-access-token",
        prefix="sq0atp-",
        pattern=r"[A-Za-z0-9_-]{22,}",
        secret=("sq0atp-YdGGmIT3R1LRXARsg0UIj4KyJV",),
        kept=("sq0atp-docs",),
    ),
    Format(
        "square-access-token",
        prefix="EAAA",
        pattern=r"[A-Za-z0-9_+-]{50,}",
        secret=("EAAAHlgIwQcDjPbmVNhEeL8f7z7ryQJ7SS4Vlsbur71okFjCMtasEIZjdk",),
        kept=("EAAAdocs",),
    ),
    # -- cloud
    Format(
        "google-api-key",
        prefix="AIza",
        pattern=r"[A-Za-z0-9_-]{35}",
        extend=True,
        secret=("AIzaOShJ2riAo6wUib7iX0BX6o4l5ZYCfdZjN3N",),
        kept=("AIzadocs",),
    ),
    Format(
        "google-oauth-client-secret",
        prefix="GOCSPX-",
        pattern=r"[A-Za-z0-9_-]{20,}",
        secret=("GOCSPX-Au366Qlqi6dfYTxEXhwk",),
        kept=("GOCSPX-docs",),
    ),
    Format(
        "google-oauth-token",
        prefix="ya29.",
        pattern=r"[A-Za-z0-9_-]{20,}",
        secret=("ya29.umRs0rO7HYHMmmboigHLxKl",),
        kept=("ya29.docs",),
    ),
    Format(
        "google-oauth-token",
        prefix="1//0",
        pattern=r"[A-Za-z0-9_-]{40,}",
        secret=("1//0ML55EoaxYyhD17SFd0W7fKyqMkDp1uZIFzQycRP7DkDN",),
        kept=("1//0docs",),
    ),
    Format(
        "digitalocean-token",
        prefix_rx=r"do[por]_v1_",
        pattern=r"[A-Za-z0-9]{40,}",
        secret=("doo_v1_y79U72xbqkGQSLGofjmbjCLuPamcX5lmSg4oSB0Fkc",),
    ),
    Format(
        "heroku-api-key",
        prefix="HRKU-",
        pattern=r"[A-Za-z0-9_-]{20,}",
        secret=("HRKU-oPFr5KJCUz3Ui88HBQh43",),
        kept=("HRKU-docs",),
    ),
    Format(
        "databricks-token",
        prefix="dapi",
        pattern=r"[a-f0-9]{32}(?:-\d+)?(?![A-Za-z0-9])",
        secret=("dapi719fd54a9b1481c85ac4156347516c74-4",),
        kept=("dapidocs",),
    ),
    Format(
        "doppler-token",
        prefix="dp.",
        pattern=r"(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}",
        secret=("dp.audit.pnVlasU9qgT8rLumg3UJ1la8zlOjpaI9UVltJ9WeLU7o0",),
        kept=("dp.docs",),
    ),
    Format(
        "vault-token",
        prefix_rx=r"hv[sbr]\.",
        pattern=r"[A-Za-z0-9_-]{24,}",
        secret=("hvb.BjJW62ZZC9Ljr7WUxwRZaPDDe1Iq",),
    ),
    Format(
        "cloudflare-origin-ca-key",
        prefix="v1.0-",
        pattern=r"[a-f0-9]{24}-[a-f0-9]{146}",
        secret=(
            "v1.0-148f7978ed9137e81c8d75ae-60dd05eef190dd30281e72316c7f761103590c33b1f3d77175c42fe116240531bd565f932c4c4ac0b45f85b299b6ff66317769b18e8928312b43da0f88233138507b159c53492e647c",
        ),
        kept=("v1.0-docs",),
    ),
    Format(
        "azure-storage-key",
        pattern=r"accountkey[ \t]*=[ \t]*(?P<secret>[a-z0-9+/]{20,}={0,2})",
        lowered=True,
        priority="context",
        secret=("accountkey   \t  =uc3gte5krvvcss84440unrp",),
    ),
    Format(
        "azure-storage-key",
        pattern=r"sharedaccesskey[ \t]*=[ \t]*(?P<secret>[a-z0-9+/]{20,}={0,2})",
        lowered=True,
        priority="context",
        secret=("sharedaccesskey\t\t=   \t \tmx41iih6x1gt5or2471z0ee=",),
    ),
    Format(
        "aws-secret-access-key",
        pattern=r"aws_?secret(?:_?access)?(?:_?key)?(?:\\{0,3}[\"'])?[ \t]*(?:=>|:=|=|:)[ \t]*"
        r"(?:\\{0,3}[\"'])?(?P<secret>[a-z0-9/+=]{40})(?![a-z0-9/+=])",
        lowered=True,
        priority="context",
        secret=("aws_secretaccesskey   \t=>\t \\'pee5x8qvxv5lgmsdj2qbugkcmnnd9hfgkvbcc7ev",),
    ),
    Format(
        "aws-secret-access-key",
        pattern=r"secret_?access_?key(?:\\{0,3}[\"'])?[ \t]*(?:=>|:=|=|:)[ \t]*"
        r"(?:\\{0,3}[\"'])?(?P<secret>[a-z0-9/+=]{40})(?![a-z0-9/+=])",
        lowered=True,
        priority="context",
        secret=("secretaccess_key\t:   \t\thu1eysikjs8ixllfo9awnk267z342xqadh8ifhs6",),
    ),
    # -- vendor tokens known only from their context
    Format(
        "heroku-api-key",
        pattern=r"heroku[^\n]{0,40}?(?P<secret>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}"
        r"-[0-9a-f]{12})(?![0-9a-f])",
        lowered=True,
        priority="context",
        secret=("heroku9m418aa97ee-8215-b7a5-5f2a-70bf7d819a05",),
    ),
    Format(
        "heroku-api-key",
        form="vendor-assignment",
        vendor="heroku",
        pattern=r"[a-z0-9_-]{20,}",
        secret=("herokujo0rtokenxkjr3\\\\' \t =>\t pu8c6er8w9im9vclumre5nfs",),
    ),
    Format(
        "atlassian-api-token",
        form="vendor-assignment",
        vendor="atlassian",
        pattern=r"[a-z0-9_=+/-]{16,}",
        secret=('atlassianbkeys6mc4h\\\\\\"\t\t\t  =>\t\t\t\t\t\\\\"eb3lll4mjwbtiray',),
    ),
    Format(
        "atlassian-api-token",
        form="vendor-assignment",
        vendor="jira",
        pattern=r"[a-z0-9_=+/-]{16,}",
        secret=("jirapat52k : s1cmhi664vro5imlbxb919",),
    ),
    Format(
        "atlassian-api-token",
        form="vendor-assignment",
        vendor="confluence",
        pattern=r"[a-z0-9_=+/-]{16,}",
        secret=('confluencej80secret87"   \t\t\t: \t \\\\\\"ls5y9xn8vjwdg1jyztxmo5',),
    ),
    Format(
        "atlassian-api-token",
        form="vendor-assignment",
        vendor="bitbucket",
        pattern=r"[a-z0-9_=+/-]{16,}",
        secret=("bitbucketwyknsecret4c\t  :=  \tak52vplm5o4yisy8u37b2d",),
    ),
    Format(
        "cloudflare-api-token",
        form="vendor-assignment",
        vendor="cloudflare",
        pattern=r"[a-z0-9_-]{32,}",
        secret=("cloudflaremesuspassword\\\\'\t:      \\\\'f89w40dch5bp6vy9w275eip7e9ntdaei36jqn",),
    ),
    Format(
        "cloudflare-api-token",
        form="vendor-assignment",
        prefix="cf_",
        pattern=r"[a-z0-9_-]{32,}",
        secret=("cf_56pat4u2 = \t\t\t\t'1d9geiasjduph2j5ktbhtp8ex15u4tc45",),
        kept=("cf_docs",),
    ),
    Format(
        "cloudflare-api-token",
        form="vendor-assignment",
        prefix="cf-",
        pattern=r"[a-z0-9_-]{32,}",
        secret=("cf-9n8vcpassword6cw21c\\\" \t\t =\t    'r4olr62mzadq3a4cj33df9ktjk42eocp38c24b",),
        kept=("cf-docs",),
    ),
    Format(
        "twilio-auth-token",
        form="vendor-assignment",
        vendor="twilio",
        pattern=r"[a-z0-9]{32}",
        secret=("twiliopatqj7jvd   : \tkcbset9fgq3n0py2x45xwxtv278jjcfg",),
    ),
    # -- structured tokens
    Format(
        "jwt",
        pattern=r"eyJ(?:(?<![A-Za-z0-9_-]eyJ)|(?<=\\[ntr]eyJ))"
        r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*){0,3}",
        validate="formal-jwt",
        secret=("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTQyIn0.Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA",),
        kept=("eyJhbGciOi.notjson.xx",),
    ),
    # -- URLs and connection strings
    Format(
        "url-password",
        pattern=r"://[^\s:/?#@\"'<>\[\]{}\\]{0,256}:(?P<secret>[^\s/?#\"'<>\\]{1,512})@"
        r"(?=[A-Za-z0-9\[._-])",
        priority="context",
        kind_of="url-credential",
        validate="not-reference",
        secret=("postgres://app:Xk9vLm2pQz7t@db.internal:5432/app",),
        kept=("https://user@example.org/x",),
    ),
    Format(
        "url-token",  # a token as the whole user part: Sentry DSNs, git remotes
        pattern=r"://(?P<secret>[A-Za-z0-9_~.-]{16,256})@(?=[A-Za-z0-9\[._-])",
        priority="context",
        validate="token-user",
        secret=("https://a1b2c3d4e5f6a7b8c9d0@o12345.ingest.sentry.io/42",),
        kept=("https://git@github.com/org/repo",),
    ),
    Format(
        "password",  # .netrc: machine <host> login <user> password <secret>
        pattern=r"machine[ \t]+\S+(?:\s+(?:login|account|port|protocol)[ \t]+\S+){0,4}\s+password"
        r"[ \t]+(?P<secret>(?:[^\s\\\"]|\\(?![nrt\"])){1,256})",
        lowered=True,
        priority="context",
        validate="not-reference",
        secret=("machine \t\t7y    password    \t\\Oc\\\\",),
    ),
    Format(
        "password",  # .pgpass lines (host:port:database:user:password), where it is named
        pattern=r"(?:^|(?<=\n)|(?<=\\n))[^:\s\x00\\]{1,253}:(?:\d{1,5}|\*):[^:\s\x00]{1,128}:[^:\s\x00]{1,128}:"
        r"(?P<secret>(?:[^\s\x00\\\"]|\\(?![nrt\"])){1,256})",
        priority="context",
        validate="not-reference",
        gate=("pgpass",),
        secret=("~/.pgpass\ndb.internal:5432:app:appuser:Xk9vLm2pQz7t",),
    ),
    Format(
        "aws-signed-url",
        pattern=r"[?&;](?:x-amz-(?:signature|credential|security-token)|x-goog-(?:signature|credential))"
        r"=(?P<secret>" + _URL_VALUE + ")",
        lowered=True,
        priority="context",
        kind_of="signed-url",
        gate=("x-amz-", "x-goog-"),
        secret=("&x-goog-signature=q1suS",),
    ),
    Format(
        "azure-sas-signature",
        pattern=r"sig=(?<=[?&;]sig=)(?P<secret>" + _URL_VALUE + ")",
        lowered=True,
        priority="context",
        secret=(
            "https://acct.blob.core.windows.net/c/f?sv=2022-11-02&sig=Ab3dEf6hIj9kLm2nOp5qRs8t%3D",
        ),
        kept=("https://x.io/?sig=&a=1",),
    ),
    Format(
        "url-token",
        pattern=r"[?&;#](?:access_token|id_token|refresh_token|auth_token|token|api_key|apikey|"
        r"api-key|key|client_secret|secret|password|passwd|pwd|signature|code_verifier|jwt|"
        r"session_?id|sessionid)=(?P<secret>" + _URL_VALUE + ")",
        lowered=True,
        priority="context",
        validate="not-reference",
        gate=(
            "token=",
            "key=",
            "secret=",
            "pass",
            "pwd=",
            "signature=",
            "verifier=",
            "jwt=",
            "session_id=",
            "sessionid=",
        ),
        secret=(";key=vyXhve",),
    ),
    Format(
        "basic-auth",
        pattern=r"\-u(?<=[ \t]\-u)[ \t=]+[\"']?[^\s:\"'@]{1,128}:(?P<secret>[^\s\"']{1,256})",
        lowered=True,
        priority="context",
        validate="not-reference",
        prefilter=r"[ \t]\-u[ \t=]",
        secret=("x -u='RAd1YFZ:3cIrC",),
    ),
    Format(
        "basic-auth",
        pattern=r"\-\-user(?<=[ \t]\-\-user)[ \t=]+[\"']?[^\s:\"'@]{1,128}:"
        r"(?P<secret>[^\s\"']{1,256})",
        lowered=True,
        priority="context",
        validate="not-reference",
        prefilter=r"[ \t]\-\-user[ \t=]",
        secret=('x --user\t"qFn:sLKd',),
    ),
    # -- HTTP authorization
    Format(
        "authorization",
        pattern=_AUTH_HEAD
        + r"(?P<scheme>bearer|basic|token|bot|apikey|api-key|sso-key|jwt|negotiate|ntlm|"
        r"hmac|key|otp|ssws)[ \t]+(?P<secret>[^\s\"'\\,;`]{4,4096})",
        lowered=True,
        priority="header",
        kind_of="authorization",
        validate="not-reference",
        secret=("authorization\t   :   basic\t  PmI9",),
    ),
    Format(
        "authorization",
        pattern=_AUTH_HEAD
        + r"(?:digest|aws4-hmac-sha256|signature)[ \t]+(?P<secret>[^\"'\\\r\n]{8,4096})",
        lowered=True,
        priority="header",
        secret=("authorization\\\\\\'\t\t\t\t :\t\t \t\\\\\"digest NO9XuYwMT",),
    ),
    Format(
        "authorization",
        pattern=_AUTH_HEAD
        + r"(?P<secret>[a-z0-9._~+/=-]{16,4096})(?![a-z0-9._~+/=(-]|[ \t]+[a-z0-9])",
        lowered=True,
        priority="header",
        validate="has-digit",
        secret=("authorization\t \t:bydjtlw8bgmrdo0b",),
    ),
    Format(
        "bearer-token",
        pattern=r"bearer(?:(?<![a-z0-9_]bearer)|(?<=\\[ntr]bearer))[ \t]+(?P<secret>[a-z0-9._~+/-]{16,4096}=*)",
        lowered=True,
        priority="header",
        validate="has-digit",
        secret=("bearer\t\t\t    1v0u70cyxt28zcrs7t21===",),
    ),
    Format(
        "basic-auth",
        pattern=r"basic(?:(?<![a-z0-9_]basic)|(?<=\\[ntr]basic))[ \t]+(?P<secret>[a-z0-9+/]{8,4096}={0,2})(?![a-z0-9+/=])",
        lowered=True,
        priority="header",
        validate="basic-credential",
        secret=("Authorization: Basic YWRtaW46WGs5dkxtMnBReg==",),
        kept=("Basic authentication is on",),
    ),
    # -- formats from a public scanner catalogue (gitleaks' rules), as facts: prefix + body
    Format(
        "rubygems-api-token",
        prefix="rubygems_",
        pattern="[a-f0-9]{48}(?![a-f0-9])",
        secret=("rubygems_783783dc61a8d86ebdad92e4208e1190dc8440db8d41f8de",),
        kept=("rubygems_docs",),
    ),
    Format(
        "clojars-api-token",
        prefix="CLOJARS_",
        pattern="[a-z0-9]{60}(?![a-z0-9])",
        secret=("CLOJARS_qm0pkcdifu4q8dh0i29ql6zi7zku286wsrk13fh1ijzxe8reebiuhz8mclnf",),
        kept=("CLOJARS_docs",),
    ),
    Format(
        "dockerhub-token",
        prefix="dckr_pat_",
        pattern="[A-Za-z0-9_-]{25,}",
        secret=("dckr_pat_jG6eQo4ANNZnvvlk6kRIj3fhO4N85v",),
        kept=("dckr_pat_docs",),
    ),
    Format(
        "dockerhub-token",
        prefix="dckr_oat_",
        pattern="[A-Za-z0-9_-]{25,}",
        secret=("dckr_oat_w1e9OqS0qZQO9GmiAoPpZAkneomCp7b",),
        kept=("dckr_oat_docs",),
    ),
    Format(
        "artifactory-api-key",
        prefix="AKCp",
        pattern="[A-Za-z0-9]{69}(?![A-Za-z0-9])",
        secret=("AKCp2eP8oXEGRg2wVmEUWZmkmyk75blx30jJ8Sl1a41yWVqK3VqBmsF9oTfoJRpj6TrBKh9G0",),
        kept=("AKCpdocs",),
    ),
    Format(
        "artifactory-reference-token",
        prefix="cmVmdGtu",
        pattern="[A-Za-z0-9]{56}(?![A-Za-z0-9])",
        secret=("cmVmdGtu9PJGV4HW21EZUPAfx3xX6ZXbYEkjOvjSAushbPd6VZXucuqGUZvELLaO",),
        kept=("cmVmdGtudocs",),
    ),
    Format(
        "crates-io-token",
        prefix="cio",
        pattern="[A-Za-z0-9]{32}(?![A-Za-z0-9])",
        secret=("cio9u2YUqUKzhKjwdn9TzCOwsTyzKblKcI3",),
        kept=("ciodocs",),
    ),
    Format(
        "nuget-api-key",
        prefix="oy2",
        pattern="[a-z0-9]{43}(?![a-z0-9])",
        secret=("oy2kn4xs8a8quv70cj03x9d72wnok7zkprf1d3fh9d9li4",),
        kept=("oy2docs",),
    ),
    Format(
        "packagist-token",
        prefix="packagist_",
        pattern="[ou][ru]t_[a-f0-9]{68}",
        secret=(
            "packagist_ort_939c2184e485f6b2311273afcc42c5be0b4593864b7d45da381cfdd68aa9210e32eb",
        ),
        kept=("packagist_docs",),
    ),
    Format(
        "onepassword-service-token",
        prefix="ops_eyJ",
        pattern="[A-Za-z0-9+/=_-]{100,}",
        secret=(
            "ops_eyJZGGAz0V1EDvY4PRLFDFEaNU4OqBBFgw7EgG3l5wZ6AU8DTMLBGtXEEBzE3zFune9Btsr8uwTr45kmNS8QcD59p0XDgiDkFtDiF04",
        ),
        kept=("ops_eyJdocs",),
    ),
    Format(
        "new-relic-key",
        prefix="NRAK-",
        pattern="[A-Z0-9]{27}(?![A-Z0-9])",
        secret=("NRAK-ZKRFGPZ4TC0EIHR5BTHAMV4OAXU",),
        kept=("NRAK-docs",),
    ),
    Format(
        "new-relic-key",
        prefix="NRII-",
        pattern="[A-Za-z0-9-]{32}",
        secret=("NRII-1jsNJ87zEcRd4hOQ6NlUKZlR9uakV7n8",),
        kept=("NRII-docs",),
    ),
    Format(
        "flyio-token",
        prefix="fo1_",
        pattern="[A-Za-z0-9_-]{43}",
        secret=("fo1_wZm890tRwUFosiuMyTSwZIaU5A7AYTtDI4KvbcKFjKF",),
        kept=("fo1_docs",),
    ),
    Format(
        "planetscale-token",
        prefix="pscale_tkn_",
        pattern="[A-Za-z0-9_=.-]{32,64}",
        secret=("pscale_tkn_RL8O8FPkNg6fTJZk7GkSi8OIAxXLFxIUXu",),
        kept=("pscale_tkn_docs",),
    ),
    Format(
        "planetscale-token",
        prefix="pscale_pw_",
        pattern="[A-Za-z0-9_=.-]{32,64}",
        secret=("pscale_pw_cGorkSKQz6uLVHEGxVsDojjYCubZSArIuCr",),
        kept=("pscale_pw_docs",),
    ),
    Format(
        "planetscale-token",
        prefix="pscale_oauth_",
        pattern="[A-Za-z0-9_=.-]{32,64}",
        secret=("pscale_oauth_mhatKDmIu1cEqDuve2qkAE6Hx3SUPITjz",),
        kept=("pscale_oauth_docs",),
    ),
    Format(
        "supabase-token",
        prefix="sbp_",
        pattern="[a-f0-9]{40}(?![a-f0-9])",
        secret=("sbp_12050688c4fbaf67840569bcffbfe5aefdbd6e0b",),
        kept=("sbp_docs",),
    ),
    Format(
        "prefect-api-key",
        prefix="pnu_",
        pattern="[A-Za-z0-9]{36}(?![A-Za-z0-9])",
        secret=("pnu_tn8v509luTlZw9omyhk7917EANWmdmhofbjG",),
        kept=("pnu_docs",),
    ),
    Format(
        "readme-api-key",
        prefix="rdme_",
        pattern="[a-z0-9]{70}(?![a-z0-9])",
        secret=("rdme_i0m6j713ahy4uv3k2r9hr9b2op98wp0x49y1x41xlvyy0g177ki8ch02k4iyxcx6klchwz",),
        kept=("rdme_docs",),
    ),
    Format(
        "shippo-api-token",
        prefix="shippo_live_",
        pattern="[a-f0-9]{40}",
        secret=("shippo_live_2fd329f540542b2ba0d06541adb4b7b1f215814b",),
        kept=("shippo_live_docs",),
    ),
    Format(
        "shippo-api-token",
        prefix="shippo_test_",
        pattern="[a-f0-9]{40}",
        secret=("shippo_test_dd9d3efa4ac3e102c838b16af59c20e96c759e14",),
        kept=("shippo_test_docs",),
    ),
    Format(
        "typeform-token",
        prefix="tfp_",
        pattern="[A-Za-z0-9_.=-]{59,}",
        secret=("tfp_NXUpLKVSceJi3wwWQn4qSsaW3F9xIsDfHEbfiZaKLiRR7Y1r8gNaysY70gc9A",),
        kept=("tfp_docs",),
    ),
    Format(
        "frameio-token",
        prefix="fio-u-",
        pattern="[A-Za-z0-9_=-]{64}",
        secret=("fio-u-t1V9pCizKKcdtjDEzJMchljVDqncrYZwPH2O9KGyKBb9XzR5c62ySHY8cL6edlAG",),
        kept=("fio-u-docs",),
    ),
    Format(
        "dynatrace-token",
        prefix="dt0c01.",
        pattern=r"[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}",
        secret=(
            "dt0c01.kn5uzqEsShlzieelNtEty1JG.KveLKKIjkJXElPdkGBA0N0DtosD2VxY5lI1g54h5Zhoe3r1yEvBab9KgIDrYukOC",
        ),
        kept=("dt0c01.docs",),
    ),
    Format(
        "easypost-api-key",
        prefix="EZAK",
        pattern="[A-Za-z0-9]{54}(?![A-Za-z0-9])",
        secret=("EZAKv8oX1twQaqHdArvfI9qbWKu25nMNPBfuPJBG7mZGhl9jsAWzmxYhrS",),
        kept=("EZAKdocs",),
    ),
    Format(
        "easypost-api-key",
        prefix="EZTK",
        pattern="[A-Za-z0-9]{54}(?![A-Za-z0-9])",
        secret=("EZTKFYHEZAFOvJQnhXioHS7yPNikua1UKSER3aZkkWLCWcXjuf8nQvkvhS",),
        kept=("EZTKdocs",),
    ),
    Format(
        "duffel-token",
        prefix="duffel_live_",
        pattern="[A-Za-z0-9_=-]{43}",
        secret=("duffel_live_rsoGlmQElmZdUHbF2YIrHf2fZ0DxvZTqhv69sYOMFcA",),
        kept=("duffel_live_docs",),
    ),
    Format(
        "duffel-token",
        prefix="duffel_test_",
        pattern="[A-Za-z0-9_=-]{43}",
        secret=("duffel_test_zO2mTU5nI4kywRjvw5ay9PgaWhS68xDw8YGEaIgOU8R",),
        kept=("duffel_test_docs",),
    ),
    Format(
        "brevo-api-key",
        prefix="xkeysib-",
        pattern="[a-f0-9]{64}-[A-Za-z0-9]{16}",
        secret=(
            "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",
        ),
        kept=("xkeysib-docs",),
    ),
    Format(
        "alibaba-access-key",
        prefix="LTAI",
        pattern="[A-Za-z0-9]{20}(?![A-Za-z0-9])",
        secret=("LTAIq8yy7Ppcw2R5Ir9HnjGn",),
        kept=("LTAIdocs",),
    ),
    Format(
        "langsmith-api-key",
        prefix="lsv2_pt_",
        pattern="[a-f0-9]{32}_[a-f0-9]{10}",
        secret=("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",),
        kept=("lsv2_pt_docs",),
    ),
    Format(
        "langsmith-api-key",
        prefix="lsv2_sk_",
        pattern="[a-f0-9]{32}_[a-f0-9]{10}",
        secret=("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",),
        kept=("lsv2_sk_docs",),
    ),
    Format(
        "mapbox-token",
        prefix="sk.eyJ",
        pattern="[A-Za-z0-9._-]{60,}",
        secret=("sk.eyJ3hU4Nt6FZML1tb4Bw0NM2d5EMTgGCSLlAWg2XqqDmePSZ3GaOqLlIscC2unbkMXNp",),
        kept=("sk.eyJdocs",),
    ),
    Format(
        "airtable-token",
        prefix="pat",
        pattern=r"[A-Za-z0-9]{14}\.[a-f0-9]{64}(?![a-f0-9])",
        secret=(
            "patDRiNbLqZDJyb1N.4cb51faa90ee93ed501c27f09d7a5f3a27fa3a007ea838be78cd2324920e1d26",
        ),
        kept=("patdocs",),
    ),
    Format(
        "scalingo-token",
        prefix="tk-us-",
        pattern="[A-Za-z0-9_-]{48}",
        secret=("tk-us-Cnwi2ROsEc2QjvyoFkmvwm94ggLq67mVJPI6f1TxuL7AxLxc",),
        kept=("tk-us-docs",),
    ),
    Format(
        "gitlab-token",
        prefix="glrt-",
        pattern="[A-Za-z0-9_-]{20,}",
        secret=("glrt-uJ580vxaLZ1Z2UQm6powCxsZ",),
        kept=("glrt-docs",),
    ),
    Format(
        "gitlab-token",
        prefix="glffct-",
        pattern="[A-Za-z0-9_-]{20,}",
        secret=("glffct-z3PIlcovw3GtxBwq0RdTqBS",),
        kept=("glffct-docs",),
    ),
    Format(
        "gitlab-token",
        prefix="glpat-",
        pattern=r"[A-Za-z0-9_-]{20,300}\.[a-z0-9]{9}(?![a-z0-9])",
        secret=("glpat-X8juc3vFLmXx9QupuXgqZ5v.yint0vd9x",),
        kept=("glpat-docs",),
    ),
    Format(
        "onepassword-secret-key",
        prefix="A3-",
        pattern="[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}(?![A-Z0-9])",
        secret=("A3-SGHDJT-AFIBZUR6U8B-KUFVM-HLD4J-DZ02Z",),
        kept=("A3-docs",),
    ),
    Format(
        "adobe-client-secret",
        prefix="p8e-",
        pattern="[A-Za-z0-9]{32}(?![A-Za-z0-9])",
        secret=("p8e-llXreU3kHcqdzx3WM8r1NFr1rBFk5e3Y",),
        kept=("p8e-docs",),
    ),
    Format(
        "aws-bedrock-api-key",
        prefix="ABSK",
        pattern="[A-Za-z0-9+/]{100,}={0,2}",
        secret=(
            "ABSKsdAvh8ManjBoYVdwVFbVpeE9Lp5CGOkicBY4CYskRwfLqBQVtIFlJmX7NNmWo5cmyO6UKni49hxbguX1Z6i9qEyGSmH9wW8eqrcraFSiJc=",
        ),
        kept=("ABSKdocs",),
    ),
    Format(
        "aws-bedrock-api-key",
        prefix="bedrock-api-key-",
        pattern="[A-Za-z0-9+/=_-]{40,}",
        secret=("bedrock-api-key-85LO7it1hqKXLBf93wgx0FL0pYTSx4GYPKkI21BvqeOcP",),
        kept=("bedrock-api-key-docs",),
    ),
    Format(
        "clickhouse-api-key",
        prefix="4b1d",
        pattern="[A-Za-z0-9]{38}(?![A-Za-z0-9])",
        secret=("4b1doYvkVg1tAa1yHzkB3HnccBupn7USqGuhpHIgX7",),
        kept=("4b1ddocs",),
    ),
    Format(
        "facebook-access-token",
        prefix="EAAM",
        pattern="[A-Za-z0-9]{80,}",
        secret=(
            "EAAMOeyEyuVHoxR3wmVv2DTRb0a1GRcJy9ErthBPKhxBKXqcaYkTsezA0MUi384joQWhbIyFW3TKdeqCTxh55aN",
        ),
        kept=("EAAMdocs",),
    ),
    Format(
        "facebook-access-token",
        prefix="EAAC",
        pattern="[A-Za-z0-9]{80,}",
        secret=(
            "EAACYJZL8m8LDI6DRo6mDVibAKw2KIFZFBQpN4QSRS9czpGW0Ib9ADPqXg2SoJwYM7EJiHnILMkSbYZlJYd46spzqR",
        ),
        kept=("EAACdocs",),
    ),
    Format(
        "flutterwave-key",
        prefix="FLWSECK_TEST-",
        pattern="[A-Za-z0-9]{12,}(?:-X)?",
        secret=("FLWSECK_TEST-jE8MlpSlovFXYZ",),
        kept=("FLWSECK_TEST-docs",),
    ),
    Format(
        "flutterwave-key",
        prefix="FLWSECK-",
        pattern="[A-Za-z0-9]{12,}(?:-X)?",
        secret=("FLWSECK-r2hiA55BhH9CdGVzTI-X",),
        kept=("FLWSECK-docs",),
    ),
    Format(
        "flyio-token",
        prefix="fm1r_",
        pattern="[A-Za-z0-9+/]{80,}={0,3}",
        secret=(
            "fm1r_BuUa19L3vsIRbEVXlQIrkwpU3JJDG7Q3sYCTEEYvSQeAk7mTCe13VtzdVWl1eXIG4sEljX749gW7TiQUYNpLYQ",
        ),
        kept=("fm1r_docs",),
    ),
    Format(
        "flyio-token",
        prefix="fm1a_",
        pattern="[A-Za-z0-9+/]{80,}={0,3}",
        secret=(
            "fm1a_5ftmWLFaEVRADK6klEKJf5UNqD9M5bN30RWTCVF9U7QzaWkAG9HmIzxxJ4nrEAkjezIU4xJCJzBN2c3sKwo=",
        ),
        kept=("fm1a_docs",),
    ),
    Format(
        "flyio-token",
        prefix="fm2_",
        pattern="[A-Za-z0-9+/]{80,}={0,3}",
        secret=(
            "fm2_0DFQJUdAz7FCq99Msw8G2iyFbpSuhVjcB1GtsiaX1CDjU3okYrhh7JfP3kTuXvFVPO3gMsOvaeux3ATLp0eGQ===",
        ),
        kept=("fm2_docs",),
    ),
    Format(
        "grafana-token",
        prefix="eyJrIjoi",
        pattern="[A-Za-z0-9]{40,}={0,3}",
        secret=("eyJrIjoiB8pjLNnPS5Ut3JIz0z794tb1ez9FRMxcWzv6LIpWVkP==",),
        kept=("eyJrIjoidocs",),
    ),
    Format(
        "harness-token",
        prefix="pat.",
        pattern=r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}",
        secret=("pat.mJj17VV7Sa9BY2tfV66Mn8.gRsXShskwKMAC641VxLLA6IU.GxLa4ERWFKjy1t90Msid",),
        kept=("pat.docs",),
    ),
    Format(
        "harness-token",
        prefix="sat.",
        pattern=r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}",
        secret=("sat.UrpxMBpMVAOxo8jE7vACf3.OHCeNVLEVK3cYhDsLAALnRpt.QEhPwzkHtP8DQ7Zb8DhL",),
        kept=("sat.docs",),
    ),
    Format(
        "infracost-token",
        prefix="ico-",
        pattern="[A-Za-z0-9]{32}(?![A-Za-z0-9])",
        secret=("ico-mS4LPnTqlYGKD9e55zEQSzk1QSZ3Z2et",),
        kept=("ico-docs",),
    ),
    Format(
        "intra42-secret",
        prefix="s-s4t2ud-",
        pattern="[a-f0-9]{64}",
        secret=("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",),
        kept=("s-s4t2ud-docs",),
    ),
    Format(
        "intra42-secret",
        prefix="s-s4t2af-",
        pattern="[a-f0-9]{64}",
        secret=("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",),
        kept=("s-s4t2af-docs",),
    ),
    Format(
        "octopus-deploy-key",
        prefix="API-",
        pattern="(?=[A-Z]{0,25}[0-9])[A-Z0-9]{26}(?![A-Za-z0-9])",
        secret=("API-ATJ8HSFLWL2LQX7CZMSLMOT5ZL",),
        kept=("API-docs",),
    ),
    Format(
        "openshift-token",
        prefix="sha256~",
        pattern="[A-Za-z0-9_-]{43}",
        secret=("sha256~n4qUQlws4PeI4PDV6qwwUJnw7gBf6LlsIoNObpDWjWv",),
        kept=("sha256~docs",),
    ),
    Format(
        "settlemint-token",
        prefix="sm_pat_",
        pattern="[A-Za-z0-9]{16}",
        secret=("sm_pat_uuD5T0W9vO4Vtzsi",),
        kept=("sm_pat_docs",),
    ),
    Format(
        "settlemint-token",
        prefix="sm_aat_",
        pattern="[A-Za-z0-9]{16}",
        secret=("sm_aat_NOtAmdDWw3okaeRb",),
        kept=("sm_aat_docs",),
    ),
    Format(
        "settlemint-token",
        prefix="sm_sat_",
        pattern="[A-Za-z0-9]{16}",
        secret=("sm_sat_qCYFvdkkvixSeu7e",),
        kept=("sm_sat_docs",),
    ),
    Format(
        "sourcegraph-token",
        prefix="sgp_",
        pattern="(?:[a-f0-9]{16}_|local_)?[a-f0-9]{40}",
        secret=("sgp_local_6a49bef64940420cc8828f27ab981d7ba69d46ee",),
        kept=("sgp_docs",),
    ),
    Format(
        "stripe-key",
        prefix="sk_prod_",
        pattern="[A-Za-z0-9]{10,}",
        secret=("sk_prod_KXz6rpSMJ2iBsR",),
        kept=("sk_prod_docs",),
    ),
    Format(
        "stripe-key",
        prefix="rk_prod_",
        pattern="[A-Za-z0-9]{10,}",
        secret=("rk_prod_KJRAxRQX0EXeN",),
        kept=("rk_prod_docs",),
    ),
    Format(
        "vault-token",
        prefix="s.",
        pattern="(?=[A-Za-z]{0,23}[0-9])(?=[a-z0-9]{0,23}[A-Z])[A-Za-z0-9]{24}(?![A-Za-z0-9._-])",
        secret=("s.zCPlXOfl30lpQ0eUvhIwYeJ1",),
        kept=("s.docs",),
    ),
    Format(
        "authress-key",
        prefix="sc_",
        pattern=r"[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.acc[_-][a-z0-9-]{10,32}\.[A-Za-z0-9+/_=-]{30,120}",
        secret=("sc_xy85kkt68.rc9z80.acc-89oxsf0z8g67mx.YxLYJtgtOlzTz6LOkYIylPYh2E1XkeLiS",),
        kept=("sc_docs",),
    ),
    Format(
        "authress-key",
        prefix="authress_",
        pattern=r"[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.acc[_-][a-z0-9-]{10,32}\.[A-Za-z0-9+/_=-]{30,120}",
        secret=("authress_q84wg.wsam1i.acc_s1694t2j10t1f1t.XhFsFouZrs2ateeWP0uqPX77dEICMjya",),
        kept=("authress_docs",),
    ),
    Format(
        "tailscale-key",
        prefix="tskey-",
        pattern="(?:auth|api|client|scim|webhook)?-?[A-Za-z0-9]{8,}-[A-Za-z0-9]{20,}",
        secret=("tskey-A9ep8lppx-6X1ePtFgBldpJwPlxy7Y9izC",),
        kept=("tskey-docs",),
    ),
    Format(
        "posthog-personal-key",
        prefix="phx_",
        pattern="[A-Za-z0-9]{40,}",
        secret=("phx_ixj0LGkL2iapuGunNX3hCoD5YoyuI5YvEkpveMyM2",),
        kept=("phx_docs",),
    ),
    Format(
        "figma-token",
        prefix="figd_",
        pattern="[A-Za-z0-9_-]{38,}",
        secret=("figd_ggIypqnMczCy8X4CcStvyKmF22jYJI9X7OxZK1asjtSj",),
        kept=("figd_docs",),
    ),
    Format(
        "netlify-token",
        prefix="nfp_",
        pattern="[A-Za-z0-9]{36,}",
        secret=("nfp_sjk8Bsbk33vcD4h36x54Qf7RSnL43wfRPfJDuY",),
        kept=("nfp_docs",),
    ),
    Format(
        "render-api-key",
        prefix="rnd_",
        pattern="[A-Za-z0-9]{28,}",
        secret=("rnd_ExLmJGT1bQhAZqrZDGAxTdg30DIeGOM",),
        kept=("rnd_docs",),
    ),
    Format(
        "resend-api-key",
        prefix="re_",
        pattern="[A-Za-z0-9]{8}_[A-Za-z0-9]{24}(?![A-Za-z0-9])",
        secret=("re_tiXz071B_Nd1JBrdk6qzIncC8Z0dOPApb",),
        kept=("re_docs",),
    ),
    Format(
        "buildkite-token",
        prefix="bkua_",
        pattern="[a-f0-9]{40}",
        secret=("bkua_6444b7d080326aee7e7b6d1115eb533dd1eedeb3",),
        kept=("bkua_docs",),
    ),
    Format(
        "circleci-token",
        prefix="CCIPAT_",
        pattern="[A-Za-z0-9]{20,}_[a-f0-9]{40}",
        secret=("CCIPAT_8sAFKk00n8gVO8jR2Igx28kFCT_8ff4bb1a79f52f23ee9b2b54158fc7ccc134a5a9",),
        kept=("CCIPAT_docs",),
    ),
    Format(
        "contentful-token",
        prefix="CFPAT-",
        pattern="[A-Za-z0-9_-]{43}",
        secret=("CFPAT-dmJiCeY5nHHjsLp79DfA6g5HveAdqj0geR1Ym2SUjQA",),
        kept=("CFPAT-docs",),
    ),
    Format(
        "deno-deploy-token",
        prefix="ddp_",
        pattern="[A-Za-z0-9]{36}",
        secret=("ddp_YrGVuh8jeQLf3ACktEyNblEgidJ8bxrm2miU",),
        kept=("ddp_docs",),
    ),
    Format(
        "pinecone-api-key",
        prefix="pcsk_",
        pattern="[A-Za-z0-9]{4,10}_[A-Za-z0-9]{40,}",
        secret=("pcsk_dly47y_MMr8auTRpdD2xZeTGUUzJyUAu6H4rqUCOwuGiCUmdV",),
        kept=("pcsk_docs",),
    ),
    Format(
        "nvidia-api-key",
        prefix="nvapi-",
        pattern="[A-Za-z0-9_-]{60,}",
        secret=("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",),
        kept=("nvapi-docs",),
    ),
    Format(
        "cerebras-api-key",
        prefix="csk-",
        pattern="[a-z0-9]{40,}",
        secret=("csk-lx1besa90fd01an5npr4erqf8smcodhwgg7xrhi474qg6",),
        kept=("csk-docs",),
    ),
    Format(
        "brevo-api-key",
        prefix="xsmtpsib-",
        pattern="[a-f0-9]{64}-[A-Za-z0-9]{16}",
        secret=(
            "xsmtpsib-f9ad4ba6343cf077b64877b870f3660ec8c029ee0364b8a6c64c3d4d4d86f456-qrx39TI0CfFILp7a",
        ),
        kept=("xsmtpsib-docs",),
    ),
    Format(
        "tencent-secret-id",
        prefix="AKID",
        pattern="[A-Za-z0-9]{32}(?![A-Za-z0-9])",
        secret=("AKIDByDGGnDyPDLTvoAlj2OdK5gsweUEIks4",),
        kept=("AKIDdocs",),
    ),
    Format(
        "sonarqube-token",
        prefix="squ_",
        pattern="[a-f0-9]{40}",
        secret=("squ_25a0f71e033eca2ff6cd10ad1837945577fd4866",),
        kept=("squ_docs",),
    ),
    Format(
        "sonarqube-token",
        prefix="sqp_",
        pattern="[a-f0-9]{40}",
        secret=("sqp_0c0104904b68e9eaaf8b24ca1f0840649efb5dc1",),
        kept=("sqp_docs",),
    ),
    Format(
        "sonarqube-token",
        prefix="sqa_",
        pattern="[a-f0-9]{40}",
        secret=("sqa_2178f5966ebac8398f9c0880df19c8e8026b4596",),
        kept=("sqa_docs",),
    ),
    Format(
        "hubspot-token",
        prefix="pat-na1-",
        pattern="[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}",
        secret=("pat-na1-83a6ca16-c149-f7b6-2d58-7b9d4e84ca98",),
        kept=("pat-na1-docs",),
    ),
    Format(
        "hubspot-token",
        prefix="pat-eu1-",
        pattern="[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}",
        secret=("pat-eu1-eb78b575-257c-d8c7-0a84-ad19d1fe7eac",),
        kept=("pat-eu1-docs",),
    ),
    Format(
        "plaid-token",
        prefix="access-production-",
        pattern="[a-f0-9]{8}-[a-f0-9-]{27}",
        secret=("access-production-d73bda4a-53d48f38d4fc050066835e627e1",),
        kept=("access-production-docs",),
    ),
    Format(
        "plaid-token",
        prefix="access-development-",
        pattern="[a-f0-9]{8}-[a-f0-9-]{27}",
        secret=("access-development-4a09a8d3-326104a1bc9ffa65f8cf2fba242",),
        kept=("access-development-docs",),
    ),
    Format(
        "plaid-token",
        prefix="access-sandbox-",
        pattern="[a-f0-9]{8}-[a-f0-9-]{27}",
        secret=("access-sandbox-940cb1af-ef81ff29361eb4f280ea1d83c4b",),
        kept=("access-sandbox-docs",),
    ),
    Format(
        "bitbucket-app-password",
        prefix="ATBB",
        pattern="[A-Za-z0-9]{32,}",
        secret=("ATBBGfeIAD2qWud2hoW4faDAcSAnqYvz4XmoQbjf",),
        kept=("ATBBdocs",),
    ),
    Format(
        "supabase-secret-key",
        prefix="sb_secret_",
        pattern="[A-Za-z0-9_-]{20,}",
        secret=("sb_secret_GnHaJjmkJDfriXYeA329PT",),
        kept=("sb_secret_docs",),
    ),
    Format(
        "neon-api-key",
        prefix="napi_",
        pattern="[a-z0-9]{60,}",
        secret=("napi_63s6vzb2uxsq4mmt84qbx68rxjjw6gsot31dsg2foder1of3ks77zpwqbhvm1",),
        kept=("napi_docs",),
    ),
    Format(
        "elevenlabs-api-key",
        prefix="sk_",
        pattern="[a-f0-9]{48}(?![A-Za-z0-9])",
        secret=("sk_3a41b7d4f488667903c44f684bc6d8e5c32f0fd4db2c4adf",),
        kept=("sk_docs",),
    ),
    Format(
        "fireworks-api-key",
        prefix="fw_",
        pattern="(?=[A-Za-z]{0,23}[0-9])[A-Za-z0-9]{20,}",
        secret=("fw_nTILUq0P8iaK3CZVEUXm",),
        kept=("fw_docs",),
    ),
    Format(
        "firebase-fcm-key",
        prefix="AAAA",
        pattern="[A-Za-z0-9_-]{7}:[A-Za-z0-9_-]{100,}",
        secret=(
            "AAAAm8xsdhs:UzyS6bY5BFl9X0WBb2p38rlPNVhl0sWde2I7G7qsLq0RlKVEvbTyQ55gpjm0qTiZcTtsYte9NkcwNWoi4PaCZeD4M68xTEiDjbWL49Cib",
        ),
        kept=("AAAAdocs",),
    ),
    Format(
        "dropbox-token",
        prefix="sl.",
        pattern="[A-Za-z0-9_.-]{120,}",
        secret=(
            "sl.9I51omm5hOr0YI0GQMMfFAOTHNr4sIBIN6Bqq7p7K5f1sevXPRLdULYgmxGCdMlMN44kFiQA6td637s9HmYcpKIFw6EG08lIf88yaUMLfJzvAUwPzHR2PcFk8",
        ),
        kept=("sl.docs",),
    ),
    Format(
        "intercom-token",
        prefix="dG9rO",
        pattern="[A-Za-z0-9+/]{40,}={0,2}",
        secret=("dG9rOBXjCZIF3z20fUVnykZmpNGNDs7joiY3d6Dp8cECw8cxFn==",),
        kept=("dG9rOdocs",),
    ),
    Format(
        "salesforce-session",
        prefix="00D",
        pattern="[A-Za-z0-9]{12,15}![A-Za-z0-9._]{60,}",
        secret=("00Drm4cWmeRCshI!2fdX9Sr8PaTDOUzrgrp4hfHGydVkbXFkSRsFmTxvWjEZOFHK1NqUatfyVrUi",),
        kept=("00Ddocs",),
    ),
    Format(
        "openai-session-key",
        prefix="sess-",
        pattern="[A-Za-z0-9]{40}(?![A-Za-z0-9])",
        secret=("sess-lIPefyU26q0wUZ96UOAhUP1fTDNWKLjQIRe7hiGw",),
        kept=("sess-docs",),
    ),
    Format(
        "jwt",  # a JWT wrapped in base64 (gitleaks' jwt-base64): "eyJ" encodes as "ZXlK"
        prefix="ZXlK",
        pattern=r"[A-Za-z0-9+/]{40,}={0,2}",
        validate="base64-jwt",
        secret=(
            "ZXlKaGJHY2lPaUpJVXpJMU5pSjkuZXlKemRXSWlPaUoxYzJWeUxUUXlJbjAuWm05dlltRnlZbUY2Y1hWNE1USXpORFUyTnpnNU1B",
        ),
    ),
    Format(
        "facebook-access-token",  # <app id>|<app secret>
        pattern=r"\|(?<=(?P<head>[0-9]{14})\|)[A-Za-z0-9_-]{27,40}(?![A-Za-z0-9_-])",
        extend_left_digits=True,
        prefilter=r"[0-9]{14}\|[A-Za-z0-9_-]{27}",
        secret=("fb 12345678901234|Ab3dEf6hIj9kLm2nOp5qRs8tUv1wX",),
    ),
    Format(
        "maxmind-license-key",
        pattern=r"_mmk(?<=(?:(?<![A-Za-z0-9_])|(?<=\\[ntr]))(?P<head>[A-Za-z0-9]{6}_[A-Za-z0-9]{29})_mmk)"
        r"(?![A-Za-z0-9_])",
        gate=("_mmk",),
        secret=("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",),
    ),
    # -- password hashes: crypt(3), bcrypt, Apache, yescrypt, Argon2 (crackable offline); the
    # hash is redacted, the algorithm kept
    Format(
        "password-hash",
        pattern=r"\$2[abxy]?\$\d\d\$(?P<secret>[./A-Za-z0-9]{53})",
        priority="context",
        gate=("$2",),
        secret=("$2$71$y75fn1w1A10FrqKPq2VkPhWOUdJRkzJcMTUDbgY4Sx3Y1V0gunxVI",),
    ),
    Format(
        "password-hash",
        pattern=r"\$(?:1|5|6|md5|apr1)\$(?:rounds=\d{1,9}\$)?[./A-Za-z0-9]{1,16}\$"
        r"(?P<secret>[./A-Za-z0-9]{20,})",
        priority="context",
        gate=("$1$", "$5$", "$6$", "$md5$", "$apr1$"),
        secret=("$apr1$rounds=3735105$Ldjjg4c$coYPVwpxoJckzZaieXgtd9i4",),
    ),
    Format(
        "password-hash",
        pattern=r"\$y\$[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{1,64}\$(?P<secret>[./A-Za-z0-9]{20,})",
        priority="context",
        gate=("$y$",),
        secret=("$y$N0bR0$8TxZH$DnQRF9MUyRmYJ8u0P9zVLLA",),
    ),
    Format(
        "password-hash",
        pattern=r"\$argon2(?:id|i|d)\$v=\d+\$[^$\s]{1,64}\$[A-Za-z0-9+/]{8,}\$"
        r"(?P<secret>[A-Za-z0-9+/]{20,})",
        priority="context",
        gate=("$argon2",),
        secret=("$argon2id$v=502466$e1$XvdmAevyxqv0m$o4Fz41ItAceErDNx0IzrK",),
    ),
    # -- a token cut short at the end of a line or a text (a truncated or wrapped output, the
    # first half of a token split over two runs); at a token start: "pnpm_store_v3" holds none
    Format(
        "truncated-token",
        pattern=r"(?:(?<![A-Za-z0-9_.-])|(?<=\\[ntr]))"
        + _TRUNCATED
        + r"(?P<secret>(?=[A-Za-z_-]{0,40}[0-9])[A-Za-z0-9_-]{6,})"
        r"(?=\.{2,}|…|[ \t]*(?:\[|\()?(?:output )?truncated|[ \t]*(?:\\[nr]|\r?\n|\Z)"
        r"|\\?[\"'](?:[ \t]*[,}\]]|[ \t]*\Z))",
        priority="vendor-last",
        gate=(
            "gho_",
            "ghp_",
            "ghr_",
            "ghs_",
            "ghu_",
            "github_pat_",
            "glpat-",
            "xoxa-",
            "xoxb-",
            "xoxe-",
            "xoxp-",
            "sk-proj-",
            "sk-ant-",
            "sk_live_",
            "rk_live_",
            "npm_",
            "pypi-",
            "hf_",
            "dckr_pat_",
            "glsa_",
            "akia",
            "asia",
            "aiza",
            "ya29.",
            "shpat_",
            "sq0atp-",
        ),
        secret=("ASIAYtpYJ5Hy",),
    ),
    # -- seed phrases of wallets: 12 to 24 lowercase words after their name
    Format(
        "seed-phrase",
        pattern=r"(?:seed|recovery|mnemonic|backup|wallet|secret)[ \t]+(?:phrase|words|sentence|"
        r"seed)(?:[ \t]+(?:is|was)|[ \t]*[:=])[ \t]*(?:\\{0,3}[\"'])?"
        r"(?P<secret>(?:[a-z]{3,8}[ \t]+){11,23}[a-z]{3,8})",
        lowered=True,
        priority="context",
        secret=(
            "recovery  \t\t\t\twords \tis   sgywz \t\t\t\tvfvzoamd  \t\t\t ubekcl \t\t \tacgdcpp\t vkcy  qzgoboal   \tlgzw\t\t    \tbltxl  \t  wemdj  sxu \t\t\tvxauukfv\t \t umlwflj",
        ),
    ),
    Format(
        "seed-phrase",
        pattern=r"mnemonic[ \t]*[:=][ \t]*(?:\\{0,3}[\"'])?(?P<secret>(?:[a-z]{3,8}[ \t]+){11,23}[a-z]{3,8})",
        lowered=True,
        priority="context",
        secret=(
            "mnemonic=cxr\tqevey \t\t   hshyv\t  \tlziuemry  xshn\t \t uqkpcadc\t \t\t\t\t\tmntkvl   \t \t qccvha\t\t\t\t  \tfaipnzdj  \t\t\t \thjwjh   \t  \tmwupi\t  \t\tymwnyolg\t\tbhbz \t\t\t\t\t\twdb \t  cibr",
        ),
    ),
    # -- a user and a password told as a pair: "login admin / S3cret!", "creds are admin/S3cret"
    Format(
        "password",
        pattern="login" + _PAIR,
        lowered=True,
        priority="context",
        validate="mixed-credential",
        secret=("login\t \tas\t \t\t  :\t \t\t\t S/\t2Xf3rsAXu",),
    ),
    Format(
        "password",
        pattern=r"log\ in" + _PAIR,
        lowered=True,
        priority="context",
        validate="mixed-credential",
        secret=("log in\t:\t\t   Rw\t \t/\t\t\t  J76vqaw",),
    ),
    Format(
        "password",
        pattern="logon" + _PAIR,
        lowered=True,
        priority="context",
        validate="mixed-credential",
        secret=("logon\t\t \t   is  \t\t \t\t \t\taim9iv  \t /  \t AyIHWE2gM",),
    ),
    Format(
        "password",
        pattern="credentials" + _PAIR,
        lowered=True,
        priority="context",
        validate="mixed-credential",
        secret=("credentials   is \t\t\t:\t  \t \t\tCLnddL     /6oZp6bUOMR5b",),
    ),
    Format(
        "password",
        pattern="creds" + _PAIR,
        lowered=True,
        priority="context",
        validate="mixed-credential",
        secret=("creds\t :\t\t\t  \t3o    /0kVz6c9vgd",),
    ),
    # -- session cookies by name, wherever they appear (a header, a cookie jar, a curl -b)
    Format(
        "session-cookie",
        pattern=r"(?:_gitlab_session|jsessionid|phpsessid|connect\.sid|laravel_session|ci_session|"
        r"_session_id|sessionid|session_token|session-token|asp\.net_sessionid|\.aspxauth|"
        r"_rails_session|rack\.session|express:sess|__host-session|__secure-session|"
        r"remember_token|remember_user_token|auth_session|_forum_session|session|sess)"
        r"=(?P<secret>[^\s;&\"'`<>\\,]{12,4096})",
        lowered=True,
        priority="context",
        validate="session-value",
        secret=("rack.session=mL1Gf17HCcKBnoxoa",),
    ),
    Format(
        "slack-token",  # configuration and refresh tokens: xoxe.xoxp-1-..., xoxe-1-...
        prefix="xoxe",
        pattern=r"(?:\.xox[bp])?-\d-[A-Za-z0-9]{140,}",
        secret=(
            "xoxe-2-Hxq6irEK9fvQaxcIfMj8W3el2k3woXloNCsQfd2z5VV7Sf7GxkfoUESVR9z1Y8ChrOtIMSDnq2pGa0ZrhPCEWjZJQIvHGfoD0eik33KVktJyhGO20tAFYVI9NSeJtX4rwquqPabPCmj3IX",
        ),
        kept=("xoxedocs",),
    ),
    Format(
        "teams-webhook",
        pattern=r"webhook\.office\.com/webhookb2/[A-Za-z0-9@-]{20,}/IncomingWebhook/"
        r"(?P<secret>[A-Za-z0-9]{32}/[A-Za-z0-9-]{36})",
        gate=("webhook.office.com",),
        secret=(
            "webhook.office.com/webhookb2/KFXpAvjfCULtGGL135I88ukzSQ/IncomingWebhook/4aZ4jiFKrp7dvCy7ncKIbJXKxEcl8uDO/pMGqdvWlBJ0sJu0PF1WlAvfdGT5k1ROks4Zw",
        ),
    ),
    Format(
        "terraform-cloud-token",
        pattern=r"\.atlasv1\.(?<=(?P<head>[a-z0-9]{14})\.atlasv1\.)[A-Za-z0-9_=-]{60,70}",
        gate=(".atlasv1.",),
        secret=(
            "token ab3def6hij9klm.atlasv1.Qw3eRt5yUi7oPa9sDf2gHj4kLz6xCv8bNm1qWe3rTy5uIo7pAs9dFg2hJk4lZx6cVb8nM1",
        ),
    ),
    Format(
        "azure-ad-client-secret",
        pattern=r"Q~(?<=(?P<head>[A-Za-z0-9_~.]{3}\d)Q~)[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])",
        gate=("q~",),
        secret=("client secret Ab3d8Q~Xk9vLm2pQz7tRw4nB5vC8xY1aZ3dE6fG",),
        kept=("Q~ alone",),
    ),
    # -- credentials on command lines whose flag carries no secret-like word: the argument after
    # one of the flags of one of the tools (`-P` and `-p` differ for some tools)
    Format(
        "password",
        form="command-flag",
        tools="redis-cli",
        flags="-a|--pass|--askpass",
        lowered=True,
        secret=("redis-cli\tZYtxJ\t\t\t\t\t\t -a       CDvKuze",),
    ),
    Format(
        "password",
        form="command-flag",
        tools=r"(?:docker|podman|nerdctl|buildah|skopeo|oras|crane|helm(?:[ \t]+registry)?)[ \t]+login",
        flags="-p|--password",
        lowered=True,
        secret=(
            "helm\t \t\t \tregistry     \tlogin\t  OI   6d8qvl\t\t\t  \t\tw  \t   -p  =\t\txK6lSRa",
        ),
    ),
    Format(
        "password",
        form="command-flag",
        tools="twine",
        flags="-p|--password",
        lowered=True,
        secret=('twine \t\t1hCY  -p  \\"vTADi3',),
    ),
    Format(
        "password",
        form="command-flag",
        tools=r"az[ \t]+login|az[ \t]+ad|az[ \t]+acr|az[ \t]+aks|az[ \t]+keyvault",
        flags="-p|--password",
        lowered=True,
        secret=(
            'az login\t \t Ciy3Go0\t \t  nvuOws     \tF0 \t\t  \t\t--password \t \t \t"y6yuh3Q',
        ),
    ),
    Format(
        "password",
        form="command-flag",
        tools="sqlcmd|bcp|osql|isql",
        flags="-P|--password",
        secret=("osql\t\t f7FawpL \t--password =  \\GHyZjv",),
    ),
    Format(
        "password",
        form="command-flag",
        tools="zip|unzip|zipcloak",
        flags="-P|--password",
        secret=(
            "zipcloak tzDKTM\t\tWQ5\t  X84a \t\t\t\t \tfHKrP8  \t\t\t--password\t   \t=\t\\HmbiX",
        ),
    ),
    Format(
        "password",
        form="command-flag",
        tools="ssh-keygen",
        flags="-N|-P",
        secret=("ssh-keygen\t \t  -P    \t\t'7oajHD",),
    ),
    Format(
        "password",
        form="command-flag",
        tools="keytool",
        flags="-storepass|-keypass|-srcstorepass|-deststorepass|-srckeypass|-destkeypass",
        lowered=True,
        secret=("keytool\tcBheB \t -deststorepass  =\t\t\t\t\\cKggU",),
    ),
    Format(
        "password",
        form="command-flag",
        tools="ldapsearch|ldapadd|ldapmodify|ldapdelete|ldapwhoami|ldappasswd|ldapcompare",
        flags="-w",
        secret=("ldapcompare \t\t  \tQ2g\t\t\t\t3mWxgeC -w\t\t   \t=\\yAx91",),
    ),
    Format(
        "password",
        form="command-flag",
        tools="mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport|mongostat",
        flags="-p",
        secret=("mongoexport    \t8 -p\t\t\t\\YPhPp",),
    ),
    Format(
        "password",
        form="command-flag",
        tools="openssl",
        flags=r"-pass(?:in|out)?[ \t]+pass:|-k",
        secret=(
            "openssl   \t\t\tA\t\t\t \t\t3O \t\t 7N\t \t    j9S7S\tPN\t \t \t\te7PDUS9\t\t\t  -pass  \tpass:=01ZKmz2",
        ),
    ),
    Format(
        "password",
        form="command-flag",
        tools="mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb",
        flags="--password",
        lowered=True,
        secret=("mysqladmin \t  8f\tF9khESO\t\t\t\t   nWJ \t   --password\tCxjbGR",),
    ),
    Format(
        "password",
        form="command-flag",
        tools=r"gh[ \t]+secret[ \t]+set",
        flags="-b|--body",
        lowered=True,
        secret=("gh secret set DEPLOY_TOKEN --body Xk9vLm2pQz7tRw",),
        kept=("gh secret set DEPLOY_TOKEN --body -",),
    ),
    Format(
        "password",
        form="command-flag",
        tools="lftp|ncftp",
        flags=r"-u[ \t]+[^\s,]{1,64},",
        lowered=True,
        secret=("ncftp xD3ZjsK\t\t \tc8\t 7YKAG   \t  yVPUVR  F3\t\t -u\t  \t \tOV,\t2nvewWq",),
    ),
    Format(
        "password",
        form="command-flag",
        tools="sshpass",
        flags="-p",
        lowered=True,
        secret=("sshpass   \t\t -p\t ndMwJ2a",),
    ),
    Format(
        "password",
        form="command-flag",
        tools="snmpwalk|snmpbulkwalk|snmpget|snmpgetnext|snmpbulkget|snmpset|snmptable|snmptrap|snmpdelta|snmpdf|snmpstatus|snmpnetstat|onesixtyone",
        flags="-c|-A|-X",
        secret=("onesixtyone  \t\tpAI3Axn \t\t\t \tcNlQLr\t\t -X\t  \t=KEwUd",),
    ),
    # -- commands whose secret follows a fixed shape rather than a flag
    Format(
        "password",
        form="command",
        pattern=r"(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb)(?:[ \t]+[^\s|;&]{1,200}){0,12}?[ \t]+-p(?=[^\s])",
        secret=("mysqldump  \t\t\tiVyqxTL \t\t   1 \t\t C1Wmi6\t  \t \t\thheL \t \t\t-p'JUao02",),
    ),
    Format(
        "password",
        form="command",
        pattern=r"(?:7z|7za|7zr|sshpass)(?:[ \t]+[^\s|;&]{1,200}){0,12}?[ \t]+-p(?=[^\s`])",
        secret=("7za\t\t\t3ariEP   tO1 \t   \t\t-pcFDMb",),
    ),
    Format(
        "password",
        form="command",
        pattern="(?:smbclient|rpcclient|smbmap|smbget|crackmapexec|netexec|nxc|enum4linux)(?:[ \\t]+[^\\s|;&]{1,200}){0,12}?[ \\t]+(?:-u|--user)[ \\t=]+[\\\"']?[^\\s%'\\\"]{1,128}%",
        secret=(
            "smbget\t\t\t \tqmLoyDy\t\t\t0\t\toF\t \t\tunlDI6\t\t ZSW\t\t\t--user\t\t=\tO%SGxSi",
        ),
    ),
    Format(
        "password",
        form="command",
        pattern=r"rabbitmqctl(?:[ \t]+-\S+)*[ \t]+(?:add_user|change_password)[ \t]+\S+[ \t]+",
        secret=('rabbitmqctl  \t \t \tchange_password  \t\tYTqB\t\t\t\\"LsEP9d',),
    ),
    Format(
        "password",
        form="command",
        pattern=r"htpasswd[ \t]+-[a-mo-z]*b[a-mo-z]*(?:[ \t]+-[a-z]+)*[ \t]+\S+[ \t]+\S+[ \t]+",
        secret=("htpasswd -tfxtbbteizqh  8qGKb  \tH79vIEu  \t\t \\'4bsetNR",),
    ),
    Format(
        "password",
        form="command",
        pattern=r"htpasswd[ \t]+-(?=[a-z]*n)(?=[a-z]*b)[a-z]+(?:[ \t]+-[a-z]+)*[ \t]+\S+[ \t]+",
        secret=("htpasswd -nb admin Xk9vLm2pQz7t",),
        kept=("htpasswd -n admin",),
    ),
    Format(
        "password",
        form="command",
        pattern=r"net[ \t]+use[^\n]{0,200}?/user:\S+[ \t]+(?![/-])",
        secret=("net useemi/user:MG6ktF\t\t  \\'tmIDSi",),
    ),
    Format(
        "password",
        form="command",
        pattern=r"vault[ \t]+login(?:[ \t]+-\S+)*[ \t]+(?:token=)?(?![-\w]+=)(?!-)",
        secret=('vault login\t\t\t-sWx\t\t    \t-21K   \t\t -15  \t\ttoken="NXGcr',),
    ),
    Format(
        "password",
        form="command",
        pattern="(?:sqlplus|rman|expdp|impdp|sqlldr|dgmgrl)(?:[ \\t]+-\\S+)*[ \\t]+[\\\"']?[a-z0-9_$#]+/(?=[^\\s@/]+(?:@|[ \\t]|$))",
        secret=("sqlplus\t\t\t\t\t-uXQuCg\t\t \t   -zM1\t\t-FnS   -vx  \t\t\t 4owybur/\\CIgez3U",),
    ),
    Format(
        "password",
        form="command",
        pattern=r"conn(?:ect)?[ \t]+[a-z0-9_$#]+/(?=[^\s@/]+@)",
        secret=("conn system/Xk9vLm2pQz7t@orcl",),
    ),
    Format(
        "password",
        form="command",
        pattern=r"identified[ \t]+by[ \t]+(?:password[ \t]+)?",
        secret=("identified by \t\\WI25aGb",),
    ),
    Format(
        "password",
        form="command",
        pattern=r"set[ \t]+password[^=\n]{0,80}=[ \t]*(?:password[ \t]*\([ \t]*)?",
        secret=("set \tpasswordYAN7=  T7Vt",),
    ),
    Format(
        "password",
        form="command",
        pattern=r"(?:echo|printf)(?:[ \t]+-[ne]+)?(?:[ \t]+'%s\\n')?[ \t]+(?=[^|\n]{1,256}\|[^|\n]{0,120}?(?:--password-stdin|--with-token|chpasswd|passwd[ \t]+--stdin|--passphrase-fd))",
        secret=("echo Xk9vLm2pQz7tRw | docker login -u me --password-stdin",),
        kept=("echo $TOKEN | docker login -u me --password-stdin",),
    ),
    Format(
        "password",
        form="command",
        pattern='pass[^\\n]{0,200}?send[ \\t]+(?:--[ \\t]+)?(?=\\\\?\\")',
        secret=('pass4send  \t \t\t"DdKfzXX',),
    ),
    Format(
        "password",
        form="command",
        pattern="(?:-u|--user)[ \\t=]+(?=[\\\"']?[^\\s:\\\"'@]{8,128}:(?:[\\s\\\"']|$))",
        secret=("curl -u apitoken-Xk9vLm2pQz: https://api.example.com",),
    ),
    Format(
        "password",
        form="command",
        pattern=r"config[ \t]+http-basic\.\S+[ \t]+\S+[ \t]+",
        secret=('config http-basic.TALIwS\t\t\t \t4wbWED \t\t "PXP4Fw',),
    ),
    Format(
        "password",
        form="command",
        pattern="convertto-securestring(?:[ \\t]+-string)?[ \\t]+(?=[\\\"'])",
        secret=("convertto-securestring   \t  -string\t\t'g5OyOq",),
    ),
    # -- secrets known by their shape or their surroundings rather than a vendor prefix
    # a private JSON Web Key (RFC 7517/7518): its private members, in a text that is a JWK
    Format(
        "jwk-private-key",
        pattern=r"\\{0,3}\"(?:d|p|q|dp|dq|qi|k)\\{0,3}\"[ \t]*:[ \t]*\\{0,3}\""
        r"(?P<secret>[A-Za-z0-9_-]{16,})",
        priority="context",
        gate=("kty",),
        secret=('{"kty":"EC","crv":"P-256","d":"Xk9vLm2pQz7tRw4nB5vC8xY1aZ3dE6fG"}',),
        kept=('{"kty":"EC","crv":"P-256","x":"Xk9vLm2pQz7tRw4nB5vC8xY1aZ3dE6fG"}',),
    ),
    # a wallet's private key: 32 bytes in hex under a wallet or key name (an address has 20)
    Format(
        "crypto-private-key",
        pattern=r"(?:wallet|priv(?:ate)?[_ -]?key|eth(?:ereum)?[_ -]?key|signer|mnemonic)"
        r"[a-z0-9_ -]{0,24}\\{0,3}[\"']?[ \t]*[=:][ \t]*\\{0,3}[\"']?"
        r"(?P<secret>0x[0-9a-f]{64})(?![0-9a-z])",
        lowered=True,
        priority="context",
        gate=(
            "wallet",
            "privkey",
            "private_key",
            "private-key",
            "private key",
            "privatekey",
            "priv_key",
            "priv-key",
            "eth_key",
            "ethereum",
            "signer",
            "mnemonic",
        ),
        secret=(
            "mnemonic'   :  \t \\\\0x5352bf7338e8363301d2582e337d3b25d7aa49f5101ae851b73a6bd0113c5d27",
        ),
    ),
    # a Bitcoin private key in Wallet Import Format, near a word that names one (the checksum
    # tells it from other base58; scanning every base58 run cost 8 ns a byte)
    Format(
        "bitcoin-wif-key",
        pattern=r"(?<![1-9A-HJ-NP-Za-km-z])(?P<secret>5[HJK][1-9A-HJ-NP-Za-km-z]{49}|"
        r"[KL][1-9A-HJ-NP-Za-km-z]{51})(?![1-9A-HJ-NP-Za-km-z])",
        priority="context",
        validate="wif",
        gate=(
            "wif",
            "privkey",
            "bitcoin",
            "btc",
            "wallet",
            "electrum",
            "private key",
            "private_key",
            "privatekey",
            "secret key",
            "seed",
        ),
        secret=("WIF private key: KwTNw9KK6VLzRqrGpNQWgnWu9XvjqonRyBpnK6KhngNent3Etwrv",),
        kept=("bitcoin tx KwTNw9KK6VLzRqrGpNQWgnWu9XvjqonRyBpnK6KhngNent3Etwra",),
    ),
    # what a secret file holds, printed after the command that printed it
    Format(
        "secret-file-content",
        pattern=r"cat(?<![\w-]cat)[ \t]+(?:-[a-z]+[ \t]+)*[^\s|;&<>]{0,200}?"
        + SECRET_FILE
        + r"[ \t]*(?:\\[nr]|\r?\n)+(?P<secret>[^\s\\\"']{6,512})",
        priority="context",
        validate="not-reference",
        gate=("cat",),
        secret=("cat\t-lmvxzz\t\t-ufdsjxb\tu.netrc\t\t \t \\r\\r\\ryAwelgIei",),
    ),
    # a bare token of three dot-separated base64url parts (bot and session tokens), no word
    # needed: random as a whole, so dotted names and versions are not taken
    Format(
        "dotted-token",
        pattern=r"(?<![A-Za-z0-9_.-])(?P<secret>[A-Za-z0-9_-]{20,120}\.[A-Za-z0-9_-]{6,60}\."
        r"[A-Za-z0-9_-]{20,200})(?![A-Za-z0-9_.-])",
        priority="entropy",
        validate="random-dotted",
        prefilter=r"[A-Za-z0-9_-]{4}\.[A-Za-z0-9_-]{6}[A-Za-z0-9_-]{0,54}\.[A-Za-z0-9_-]{4}",
        secret=("f4ySaMKjy0P7N5YjheBdYe.HsoXsYFA38VA.g5NDOzwmdhJYJfi4qOiSkul",),
    ),
)
