"""Fake secrets in realistic context, and benign texts that must survive redaction untouched.

Every value is generated here from a fixed seed, and every vendor prefix is split across a
string concatenation, so this file holds no literal credential for scanners (or people) to
trip on.  None of these values is real.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from typing import NamedTuple


class SecretCase(NamedTuple):
    format: str  # what the case is
    text: str  # the secret as it appears in context
    secret: str  # the sensitive substring that must not survive redaction
    kind: str  # the marker kind the redactor is expected to use


_rng = random.Random(20240607)
_LOWER = string.ascii_lowercase
_UPPER = string.ascii_uppercase
_DIGITS = string.digits
_ALNUM = _LOWER + _UPPER + _DIGITS
_URLSAFE = _ALNUM + "_-"
_HEXDIGITS = "0123456789abcdef"


def _rand(n: int, alphabet: str = _ALNUM) -> str:
    """Random string with at least one digit and one letter when the alphabet has both."""
    while True:
        value = "".join(_rng.choice(alphabet) for _ in range(n))
        needs_digit = any(c in _DIGITS for c in alphabet)
        needs_alpha = any(c.isalpha() for c in alphabet)
        if (not needs_digit or any(c.isdigit() for c in value)) and (
            not needs_alpha or any(c.isalpha() for c in value)
        ):
            return value


def _hex(n: int) -> str:
    return _rand(n, _HEXDIGITS)


def _digits(n: int) -> str:
    return str(_rng.randint(1, 9)) + _rand(n - 1, _DIGITS)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uuid() -> str:
    return str(uuid.UUID(int=_rng.getrandbits(128), version=4))


def _pem(label: str) -> tuple[str, str]:
    """A fake PEM block and one of its body lines."""
    lines = [_rand(64, _ALNUM + "+/") for _ in range(6)]
    dashes = "-" * 5
    block = "\n".join(
        [
            f"{dashes}BEGIN {label}{dashes}",
            *lines,
            _rand(24, _ALNUM) + "==",
            f"{dashes}END {label}{dashes}",
        ]
    )
    return block, lines[2]


def _jwt() -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(json.dumps({"sub": _uuid(), "iat": 1717000000, "scope": "repo"}).encode())
    return ".".join([header, payload, _rand(43, _URLSAFE)])


def _build() -> list[SecretCase]:
    cases: list[SecretCase] = []

    def add(fmt: str, text: str, secret: str, kind: str) -> None:
        assert secret in text, fmt
        cases.append(SecretCase(fmt, text, secret, kind))

    # ---- AWS -----------------------------------------------------------------------------
    akid = "AK" + "IA" + _rand(16, _UPPER + _DIGITS)
    add("aws-access-key-id", f"aws_access_key_id = {akid}", akid, "aws-access-key")
    asia = "AS" + "IA" + _rand(16, _UPPER + _DIGITS)
    add(
        "aws-sts-access-key-id-json",
        json.dumps({"AccessKeyId": asia, "Expiration": "2030-01-01T00:00:00Z"}),
        asia,
        "aws-access-key",
    )
    sak = _rand(40, _ALNUM + "/+")
    add("aws-secret-access-key-env", f"aws_secret_access_key={sak}", sak, "aws-secret-access-key")
    sak2 = _rand(40, _ALNUM + "/+")
    add(
        "aws-secret-access-key-json",
        '{"Credentials": {"SecretAccessKey": "' + sak2 + '", "SessionToken": "x"}}',
        sak2,
        "aws-secret-access-key",
    )

    # ---- AI providers ----------------------------------------------------------------------
    legacy = "sk" + "-" + _rand(20) + "T3Blbk" + "FJ" + _rand(20)
    add("openai-legacy-key", f"OPENAI_API_KEY={legacy}", legacy, "openai-api-key")
    proj = "sk" + "-proj-" + _rand(156, _URLSAFE)
    add("openai-project-key", f'client = OpenAI(api_key="{proj}")', proj, "openai-api-key")
    svc = "sk" + "-svcacct-" + _rand(100, _URLSAFE)
    add(
        "openai-service-account-key",
        f'curl https://api.openai.com/v1/models -H "Authorization: Bearer {svc}"',
        svc,
        "openai-api-key",
    )
    admin = "sk" + "-admin-" + _rand(64, _URLSAFE)
    add("openai-admin-key", f"Use the org admin key {admin} for usage exports.", admin,
        "openai-api-key")  # fmt: skip
    ant = "sk" + "-ant-" + "api03-" + _rand(93, _URLSAFE) + "AA"
    add("anthropic-api-key", f"ANTHROPIC_API_KEY={ant}", ant, "anthropic-api-key")
    hf = "hf" + "_" + _rand(34)
    add("huggingface-token", f"huggingface-cli login --token {hf}", hf, "huggingface-token")

    # ---- code hosting ----------------------------------------------------------------------
    ghp = "gh" + "p_" + _rand(36)
    add(
        "github-classic-pat-in-remote-url",
        f"git remote set-url origin https://x-access-token:{ghp}@github.com/acme/app.git",
        ghp,
        "github-token",
    )
    gho = "gh" + "o_" + _rand(36)
    add("github-oauth-token", f"GITHUB_TOKEN={gho}", gho, "github-token")
    ghu = "gh" + "u_" + _rand(36)
    add("github-user-to-server-token", json.dumps({"token": ghu, "expires_in": 28800}), ghu,
        "github-token")  # fmt: skip
    ghs = "gh" + "s_" + _rand(36)
    add("github-installation-token", f"installation token {ghs} expires in 1h", ghs,
        "github-token")  # fmt: skip
    ghr = "gh" + "r_" + _rand(76)
    add("github-refresh-token", f"refresh with {ghr}", ghr, "github-token")
    fine = "github" + "_pat_" + _rand(22) + "_" + _rand(59)
    add("github-fine-grained-pat", f"gh auth login --with-token <<< {fine}", fine, "github-token")
    glpat = "gl" + "pat-" + _rand(20, _URLSAFE)
    add("gitlab-pat", f"PRIVATE-TOKEN: {glpat}", glpat, "gitlab-token")
    npm = "npm" + "_" + _rand(36)
    add("npm-token-npmrc", f"//registry.npmjs.org/:_authToken={npm}", npm, "npm-token")
    pypi = "pypi" + "-AgEIcHlwaS5vcmc" + _rand(140, _URLSAFE)
    add(
        "pypi-token-pypirc",
        f"[pypi]\nusername = __token__\npassword = {pypi}\n",
        pypi,
        "pypi-token",
    )

    # ---- chat / mail -------------------------------------------------------------------------
    xoxb = "xo" + "xb-" + _digits(12) + "-" + _digits(13) + "-" + _rand(24)
    add("slack-bot-token", f"SLACK_BOT_TOKEN={xoxb}", xoxb, "slack-token")
    xoxp = "xo" + "xp-" + "-".join([_digits(12), _digits(12), _digits(13)]) + "-" + _hex(32)
    add("slack-user-token", f"The user token is {xoxp} (do not share).", xoxp, "slack-token")
    xoxa = "xo" + "xa-2-" + _digits(12) + "-" + _digits(13) + "-" + _hex(32)
    add("slack-app-access-token", f"token: '{xoxa}'", xoxa, "slack-token")
    xapp = "xa" + "pp-1-A" + _rand(10, _UPPER + _DIGITS) + "-" + _digits(13) + "-" + _hex(64)
    add("slack-app-level-token", f"SLACK_APP_TOKEN={xapp}", xapp, "slack-token")
    hook_path = "T" + _rand(8, _UPPER + _DIGITS) + "/B" + _rand(10, _UPPER + _DIGITS)
    hook_secret = _rand(24)
    hook = "https://hooks.slack" + ".com/services/" + hook_path + "/" + hook_secret
    add("slack-webhook-url", f"curl -X POST -d @msg.json {hook}", hook_secret, "slack-webhook")
    discord = "M" + _rand(23) + "." + _rand(6, _URLSAFE) + "." + _rand(38, _URLSAFE)
    add("discord-bot-token", f"DISCORD_BOT_TOKEN={discord}", discord, "discord-bot-token")
    telegram = _digits(10) + ":" + "AA" + _rand(33, _URLSAFE)
    add(
        "telegram-bot-token",
        f"GET https://api.telegram.org/bot{telegram}/getMe",
        telegram,
        "telegram-bot-token",
    )
    sendgrid = "SG" + "." + _rand(22, _URLSAFE) + "." + _rand(43, _URLSAFE)
    add("sendgrid-api-key", f"sendgrid.SendGridAPIClient('{sendgrid}')", sendgrid,
        "sendgrid-api-key")  # fmt: skip
    mailgun = "key" + "-" + _rand(32, _LOWER + _DIGITS)
    add("mailgun-api-key", f"curl -s --user 'api:{mailgun}' https://api.mailgun.net/v3", mailgun,
        "mailgun-api-key")  # fmt: skip
    twilio_sk = "SK" + _hex(32)
    add("twilio-api-key", f"TWILIO_API_KEY={twilio_sk}", twilio_sk, "twilio-api-key")
    twilio_token = _hex(32)
    add(
        "twilio-auth-token-with-account-sid",
        f'client = Client("{"AC" + _hex(32)}", "{twilio_token}")',
        twilio_token,
        "twilio-auth-token",
    )

    # ---- payments / commerce -------------------------------------------------------------------
    for name, prefix in (
        ("stripe-secret-live", "sk" + "_live_"),
        ("stripe-restricted-live", "rk" + "_live_"),
        ("stripe-secret-test", "sk" + "_test_"),
        ("stripe-publishable-live", "pk" + "_live_"),
    ):
        value = prefix + _rand(24)
        add(name, f'stripe.api_key = "{value}"', value, "stripe-key")
    shpat = "shp" + "at_" + _hex(32)
    add("shopify-access-token", f"X-Shopify-Access-Token: {shpat}", shpat, "shopify-token")
    shpss = "shp" + "ss_" + _hex(32)
    add("shopify-shared-secret", f"shared secret {shpss}", shpss, "shopify-token")
    sq_atp = "sq0" + "atp-" + _rand(22, _URLSAFE)
    add("square-access-token-legacy", f"SQUARE_ACCESS_TOKEN={sq_atp}", sq_atp,
        "square-access-token")  # fmt: skip
    sq_eaaa = "EA" + "AA" + _rand(60, _URLSAFE)
    add("square-access-token", f"Authorization: Bearer {sq_eaaa}", sq_eaaa, "square-access-token")

    # ---- Google / GCP -----------------------------------------------------------------------
    aiza = "AI" + "za" + _rand(35, _URLSAFE)
    add(
        "google-api-key-in-query",
        f"https://maps.googleapis.com/maps/api/geocode/json?address=Paris&key={aiza}",
        aiza,
        "google-api-key",
    )
    gocspx = "GOC" + "SPX-" + _rand(28, _URLSAFE)
    add(
        "google-oauth-client-secret",
        json.dumps({"installed": {"client_id": "1234.apps.googleusercontent.com",
                                  "client_secret": gocspx}}),
        gocspx,
        "google-oauth-client-secret",
    )  # fmt: skip
    pem, pem_line = _pem("PRIVATE KEY")
    add(
        "gcp-service-account-json",
        json.dumps(
            {
                "type": "service_account",
                "project_id": "acme-prod",
                "private_key": pem + "\n",
                "client_email": "runner@acme-prod.iam.gserviceaccount.com",
            }
        ),
        pem_line,
        "private-key",
    )

    # ---- Azure --------------------------------------------------------------------------------
    account_key = _rand(86, _ALNUM + "+/") + "=="
    add(
        "azure-storage-connection-string",
        "DefaultEndpointsProtocol=https;AccountName=acmestore;AccountKey="
        + account_key
        + ";EndpointSuffix=core.windows.net",
        account_key,
        "azure-storage-key",
    )
    sig = _rand(43, _ALNUM) + "%3D"
    add(
        "azure-sas-url",
        "https://acmestore.blob.core.windows.net/reports/q1.csv?sv=2022-11-02&ss=b&srt=o&sp=r"
        "&se=2030-01-01T00:00:00Z&spr=https&sig=" + sig,
        sig,
        "azure-sas-signature",
    )

    # ---- other SaaS ------------------------------------------------------------------------
    heroku = _uuid()
    add("heroku-api-key", f"HEROKU_API_KEY={heroku}", heroku, "heroku-api-key")
    atatt = "ATA" + "TT3xFfGF0" + _rand(180, _URLSAFE) + "=" + _hex(8).upper()
    add("atlassian-api-token", f"JIRA_API_TOKEN={atatt}", atatt, "atlassian-api-token")
    legacy_jira = _rand(24)
    add("atlassian-token-in-context", f'confluence_api_token = "{legacy_jira}"', legacy_jira,
        "atlassian-api-token")  # fmt: skip
    dapi = "da" + "pi" + _hex(32)
    add("databricks-token", f"DATABRICKS_TOKEN={dapi}", dapi, "databricks-token")
    doppler = "dp" + ".pt." + _rand(43)
    add("doppler-token", f"doppler run --token {doppler} -- ./start.sh", doppler, "doppler-token")
    hvs = "hv" + "s." + _rand(90, _URLSAFE)
    add("vault-token", f"VAULT_TOKEN={hvs} vault kv get secret/app", hvs, "vault-token")
    linear = "lin" + "_api_" + _rand(40)
    add("linear-api-key", f"LINEAR_API_KEY={linear}", linear, "linear-api-key")
    notion_old = "sec" + "ret_" + _rand(43)
    add("notion-token-legacy", f"notion = Client(auth={notion_old!r})", notion_old, "notion-token")
    ntn = "nt" + "n_" + _rand(46)
    add("notion-token", f"NOTION_TOKEN={ntn}", ntn, "notion-token")
    pmak = "PM" + "AK-" + _hex(24) + "-" + _hex(34)
    add("postman-api-key", f"x-api-key: {pmak}", pmak, "postman-api-key")
    dop = "do" + "p_v1_" + _hex(64)
    add("digitalocean-token", f"doctl auth init -t {dop}", dop, "digitalocean-token")
    cloudflare = _rand(40, _URLSAFE)
    add("cloudflare-api-token", f"CLOUDFLARE_API_TOKEN={cloudflare}", cloudflare,
        "cloudflare-api-token")  # fmt: skip

    # ---- private keys --------------------------------------------------------------------------
    for name, label in (
        ("rsa-private-key", "RSA PRIVATE KEY"),
        ("openssh-private-key", "OPENSSH PRIVATE KEY"),
        ("ec-private-key", "EC PRIVATE KEY"),
        ("pgp-private-key-block", "PGP PRIVATE KEY BLOCK"),
    ):
        block, line = _pem(label)
        add(name, f"$ cat ~/.ssh/id_key\n{block}\n$ ls", line, "private-key")

    # ---- tokens ----------------------------------------------------------------------------------
    jwt = _jwt()
    add("jwt", f"Cookie: session={jwt}; Path=/", jwt, "jwt")
    bearer = _rand(40, _ALNUM + "._-")
    add("authorization-bearer-header", f"Authorization: Bearer {bearer}", bearer, "bearer-token")
    basic = base64.b64encode(("deploy:" + _rand(18)).encode()).decode()
    add("authorization-basic-header", f"Authorization: Basic {basic}", basic, "basic-auth")
    entropy = _rand(32)
    add("high-entropy-in-context", f"the webhook signing key is {entropy}", entropy,
        "high-entropy-secret")  # fmt: skip

    # ---- URLs --------------------------------------------------------------------------------------
    url_pw = _rand(16)
    add("basic-auth-url", f"git clone https://deploy:{url_pw}@git.example.com/acme/app.git",
        url_pw, "url-password")  # fmt: skip
    for name, param in (
        ("url-token-param", "token"),
        ("url-access-token-param", "access_token"),
        ("url-api-key-param", "api_key"),
    ):
        value = _rand(32, _URLSAFE)
        add(name, f"GET https://api.example.com/v1/items?limit=10&{param}={value}&page=2", value,
            "url-token")  # fmt: skip
    amz_sig = _hex(64)
    add(
        "aws-presigned-url-signature",
        "https://acme.s3.amazonaws.com/report.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=" + amz_sig,
        amz_sig,
        "aws-signed-url",
    )
    amz_cred = "AK" + "IA" + _rand(16, _UPPER + _DIGITS)
    add(
        "aws-presigned-url-credential",
        "https://acme.s3.amazonaws.com/a.txt?X-Amz-Credential="
        + amz_cred
        + "%2F20240101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Expires=60",
        amz_cred,
        "aws-access-key",
    )
    for name, template in (
        ("postgres-connection-string", "postgres://app:{pw}@db.internal:5432/app"),
        ("mysql-connection-string", "DATABASE_URL=mysql://root:{pw}@127.0.0.1:3306/shop"),
        ("mongodb-srv-connection-string", "mongodb+srv://svc:{pw}@cluster0.ab1cd.mongodb.net/db"),
        ("redis-connection-string", "REDIS_URL=redis://:{pw}@cache.internal:6379/0"),
    ):
        pw = _rand(20)
        add(name, template.format(pw=pw), pw, "connection-string")

    # ---- assignments ---------------------------------------------------------------------------
    assignments = (
        ("shell-password-quoted", 'PASSWORD="{v}"', "password"),
        ("json-password", '{{"username": "admin", "password": "{v}"}}', "password"),
        ("yaml-password", "database:\n  user: app\n  password: {v}\n  host: db", "password"),
        ("cli-password-flag", "mysql -u root --password {v} shop", "password"),
        ("export-api-token", "export API_TOKEN={v}", "token"),
        ("env-secret", "secret={v}", "secret"),
        ("passwd-assignment", "passwd={v}", "password"),
        ("apikey-assignment", "apikey={v}", "api-key"),
        ("client-secret-assignment", "client_secret={v}", "secret"),
        ("auth-assignment", "auth={v}", "auth"),
        ("python-password-literal", "db_password = '{v}'", "password"),
        ("python-kwarg-token", 'connect(host="db", token="{v}")', "token"),
        ("xml-password", "<password>{v}</password>", "password"),
    )
    for name, template, kind in assignments:
        value = _rand(14)
        add(name, template.format(v=value), value, kind)
    return cases


CASES: list[SecretCase] = _build()

SECRETS: list[tuple[str, str]] = [(case.format, case.text) for case in CASES]


def secret_values() -> list[str]:
    """The raw secret substrings, aligned with `SECRETS`; none may survive redaction."""
    return [case.secret for case in CASES]


_SHA1 = hashlib.sha1(b"sandbox-memory").hexdigest()
_SHA256 = hashlib.sha256(b"sandbox-memory").hexdigest()

BENIGN: list[str] = [
    "The agent read the README, summarised the key points and opened a pull request.",
    "I couldn't log in, so I asked the user to reset their password through the web UI.",
    "Reset your password: click the link below.",
    f"commit {_SHA1}\nAuthor: Dev <dev@example.com>\n\n    Fix flaky test",
    f"git checkout {_SHA1[:12]} && git log --oneline -n 5",
    f"docker pull python@sha256:{_SHA256}",
    f"sha256 checksum of the key file: {_SHA256}",
    "request id 123e4567-e89b-12d3-a456-426614174000 finished in 35ms",
    "idempotency key 7c9e6679-7425-40de-944b-e07fc1f90ae7",
    "/home/agent/workspace/src/sandbox_memory/redact.py:120: in redact_text",
    "pytest -q tests/test_redact.py",
    "password = get_password()",
    "token = os.environ['API_TOKEN']",
    "api_key = settings.OPENAI_API_KEY",
    "export OPENAI_API_KEY=$OPENAI_API_KEY",
    "      token: ${{ secrets.GITHUB_TOKEN }}",
    "def login(username: str, password: str) -> bool:",
    "def connect(api_key: str | None = None, token: Optional[str] = None) -> Client:",
    "self.token = token",
    "if not token:\n    raise ValueError('missing token')",
    '{"usage": {"prompt_tokens": 57, "completion_tokens": 12, "total_tokens": 69}, '
    '"max_tokens": 1024}',
    "tokenizer = AutoTokenizer.from_pretrained('bert-base-uncased')",
    "KeyError: 'user_id'",
    "https://example.com/search?q=redaction&page=2&sort=desc",
    "ssh://git@github.com/acme/app.git",
    "Contact alice@example.com about the invoice.",
    "The task-management-service-v2 handles retries.",
    "Authorization: Bearer $TOKEN",
    "password_reset_url = 'https://example.com/reset'",
    "secret_name: my-app-secret",
    "2024-05-01T12:00:00Z INFO request completed in 35ms",
    "Version 1.2.3-beta.4+build.5678 released",
    "pip install 'detect-secrets>=1.5,<2'",
    "The monkey-patched client ignores keyboard shortcuts.",
    '{"type": "function_call", "name": "read_file", '
    '"arguments": "{\\"path\\": \\"/workspace/src/app.py\\"}", "call_id": "call_01"}',
    "- Prefers small PRs.\n- Uses `uv` for environments.\n- Deploys on Fridays are banned.",
    "[REDACTED:aws-access-key] was already removed from this line.",
]
