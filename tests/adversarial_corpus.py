"""A red-team corpus of secret forms (issue 10): what a checker is likely to try.

Every value is synthetic, generated here from a fixed seed; vendor prefixes are split across
string concatenations so this file holds no literal credential. The formats come from the
rule catalogues of public scanners (gitleaks, trufflehog, detect-secrets), read as facts.

`CASES` are (class, name, text, secrets): after redaction no piece of a secret may survive
(`leaks`). `NEAR_MISSES` are texts about secrets that hold none and must come out unchanged.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
import urllib.parse
import uuid
from typing import NamedTuple


class Case(NamedTuple):
    cls: str  # the class of form: provider, private-key, url, header, env, words, ...
    name: str
    text: str
    secrets: tuple[str, ...]  # none of these, nor any 10 characters of them, may survive


_rng = random.Random(10_2026)
_U = string.ascii_uppercase
_L = string.ascii_lowercase
_D = string.digits
_AN = _U + _L + _D
_UA = _U + _D
_LA = _L + _D
_HX = "0123456789abcdef"
_URL = _AN + "_-"
_B64 = _AN + "+/"


def r(n: int, alphabet: str = _AN) -> str:
    """Random, with a digit and a letter when the alphabet has both (so never a word)."""
    while True:
        v = "".join(_rng.choice(alphabet) for _ in range(n))
        if (not set(alphabet) & set(_D) or any(c.isdigit() for c in v)) and (
            not any(c.isalpha() for c in alphabet) or any(c.isalpha() for c in v)
        ):
            return v


def _uuid() -> str:
    return str(uuid.UUID(int=_rng.getrandbits(128), version=4))


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt(claims: dict[str, object] | None = None, alg: str = "HS256") -> str:
    head = _b64url(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    body = _b64url(json.dumps(claims or {"sub": _uuid(), "iat": 1767225600}).encode())
    return f"{head}.{body}.{r(43, _URL)}"


def _pem_lines(n: int = 8) -> list[str]:
    return [r(64, _B64) for _ in range(n)] + [r(20, _B64) + "=="]


def _block(label: str, lines: list[str], eol: str = "\n") -> str:
    d = "-" * 5
    return eol.join([f"{d}BEGIN {label}{d}", *lines, f"{d}END {label}{d}"])


# ---- provider formats (fixed prefixes) --------------------------------------------------------

# (name, token) for formats of the public catalogues that docs/robustness.md did not list.
PROVIDER_TOKENS: list[tuple[str, str]] = [
    (
        "1password-secret-key",
        "A3" + "-" + r(6, _UA) + "-" + r(11, _UA) + "-" + "-".join(r(5, _UA) for _ in range(3)),
    ),
    ("adobe-client-secret", "p8" + "e-" + r(32, _AN)),
    ("anthropic-admin-key", "sk" + "-ant-admin01-" + r(93, _URL) + "AA"),
    ("aws-bedrock-long-lived", "AB" + "SK" + r(132, _B64)),
    ("clickhouse-cloud-secret", "4b" + "1d" + r(38, _AN)),
    ("digitalocean-oauth", "do" + "o_v1_" + r(64, _HX)),
    ("facebook-page-token", "EA" + "AM" + r(120, _AN)),
    ("facebook-app-token", r(15, _D) + "|" + r(32, _URL)),
    ("flutterwave-secret", "FLW" + "SECK_TEST-" + r(32, "abcdefgh0123456789") + "-X"),
    ("flyio-macaroon", "fm" + "2_" + r(140, _B64)),
    ("gitlab-deploy-token", "gl" + "dt-" + r(20, _URL)),
    ("gitlab-feed-token", "gl" + "ft-" + r(20, _URL)),
    ("gitlab-incoming-mail", "gl" + "imt-" + r(25, _URL)),
    ("gitlab-agent-token", "gl" + "agent-" + r(50, _URL)),
    ("gitlab-oauth-secret", "gl" + "oas-" + r(64, _URL)),
    ("gitlab-trigger-token", "gl" + "ptt-" + r(40, _HX)),
    ("gitlab-runner-registration", "GR13" + "48941" + r(20, _URL)),
    ("gitlab-scim-token", "gl" + "soat-" + r(20, _URL)),
    ("gitlab-ci-job-token", "gl" + "cbt-" + r(3, _AN) + "_" + r(20, _URL)),
    ("gitlab-feature-flag", "gl" + "ffct-" + r(20, _URL)),
    ("gitlab-routable-pat", "gl" + "pat-" + r(40, _URL) + "." + r(2, _LA) + r(7, _LA)),
    ("gitlab-session-cookie", r(32, _LA)),
    ("grafana-legacy-key", "eyJr" + "Ijoi" + r(80, _AN)),
    ("harness-pat", "pa" + "t." + r(22, _URL) + "." + r(24, _AN) + "." + r(20, _AN)),
    ("infracost-token", "ic" + "o-" + r(32, _AN)),
    ("intra42-secret", "s-s4" + "t2ud-" + r(64, _HX)),
    ("maxmind-license", r(6, _AN) + "_" + r(29, _AN) + "_m" + "mk"),
    ("octopus-deploy-key", "AP" + "I-" + r(26, _UA)),
    ("openshift-token", "sha" + "256~" + r(43, _URL)),
    ("settlemint-pat", "sm" + "_pat_" + r(16, _AN)),
    ("sourcegraph-token", "sg" + "p_" + r(16, _HX) + "_" + r(40, _HX)),
    ("stripe-prod-restricted", "rk" + "_prod_" + r(40, _AN)),
    ("vault-batch-token", "hv" + "b." + r(150, _URL)),
    ("vault-legacy-token", "s" + "." + r(24, _AN)),
    (
        "authress-key",
        "sc" + "_" + r(10, _LA) + "." + r(5, _LA) + ".acc_" + r(16, _LA) + "." + r(60, _B64),
    ),
    ("jwt-base64", _b64(_jwt())),
    ("slack-legacy-workspace", "xo" + "xr-" + r(40, _AN)),
    (
        "slack-legacy-token",
        "xo" + "xs-" + r(11, _D) + "-" + r(11, _D) + "-" + r(12, _D) + "-" + r(64, _HX),
    ),
    ("tailscale-auth-key", "tskey" + "-auth-" + r(12, _AN) + "-" + r(32, _AN)),
    ("tailscale-api-key", "tskey" + "-api-" + r(12, _AN) + "-" + r(32, _AN)),
    ("posthog-personal-key", "ph" + "x_" + r(43, _AN)),
    ("figma-pat", "fi" + "gd_" + r(40, _URL)),
    ("netlify-pat", "nf" + "p_" + r(40, _AN)),
    ("render-api-key", "rn" + "d_" + r(32, _AN)),
    ("resend-api-key", "re" + "_" + r(8, _AN) + "_" + r(24, _AN)),
    ("buildkite-token", "bk" + "ua_" + r(40, _HX)),
    ("circleci-pat", "CCI" + "PAT_" + r(22, _AN) + "_" + r(40, _HX)),
    ("contentful-pat", "CF" + "PAT-" + r(43, _URL)),
    ("deno-deploy-token", "dd" + "p_" + r(36, _AN)),
    ("pinecone-key", "pc" + "sk_" + r(6, _AN) + "_" + r(60, _AN)),
    ("nvidia-api-key", "nv" + "api-" + r(64, _URL)),
    ("cerebras-api-key", "cs" + "k-" + r(48, _LA)),
    ("brevo-smtp-key", "xsmtp" + "sib-" + r(64, _HX) + "-" + r(16, _AN)),
    ("tencent-secret-id", "AK" + "ID" + r(32, _AN)),
    ("okta-api-token", "00" + r(40, _URL)),
    ("sonarqube-user-token", "sq" + "u_" + r(40, _HX)),
    ("sonarqube-project-token", "sq" + "p_" + r(40, _HX)),
    ("hubspot-private-app", "pat" + "-na1-" + _uuid()),
    ("plaid-access-token", "access" + "-production-" + _uuid()),
    ("bitbucket-app-password", "AT" + "BB" + r(32, _AN) + r(8, _UA)),
    ("supabase-secret-key", "sb" + "_secret_" + r(32, _URL)),
    ("neon-api-key", "na" + "pi_" + r(64, _LA)),
    ("elevenlabs-key", "sk" + "_" + r(48, _HX)),
    ("fireworks-key", "fw" + "_" + r(24, _AN)),
    ("firebase-fcm-key", "AAAA" + r(7, _URL) + ":" + r(140, _URL)),
    ("dropbox-short-lived", "sl" + "." + r(140, _URL)),
    ("intercom-token", "dG9r" + "Oj" + r(58, _AN) + "="),
    ("salesforce-session", "00D" + r(12, _AN) + "!" + r(96, _AN + ".")),
    ("openai-session-key", "se" + "ss-" + r(40, _AN)),
    ("linear-client-secret", "lin" + "_oauth_" + r(64, _HX)),
    ("doppler-service-token", "dp" + ".st." + r(40, _AN)),
    ("azure-devops-pat", r(52, "abcdefghijklmnopqrstuvwxyz234567")),
]
# The Azure DevOps PAT and the Okta token have no safe prefix: they need their key name.
NEEDS_CONTEXT = {"azure-devops-pat", "okta-api-token"}


def _provider_cases() -> list[Case]:
    cases = []
    for name, token in PROVIDER_TOKENS:
        if name == "gitlab-session-cookie":
            texts = [f"_gitlab_session={token}", f"curl -b '_gitlab_session={token}' x"]
        elif name in NEEDS_CONTEXT:
            texts = [
                f"AZURE_DEVOPS_PAT={token}" if "azure" in name else f"Authorization: SSWS {token}"
            ]
        else:
            texts = [
                f"deploy with {token} now",
                json.dumps({"credential": {"value_set": [token]}, "n": 1}),
                f"`{token}`",
            ]
        for n, text in enumerate(texts):
            cases.append(Case("provider", f"{name}/{n}", text, (token,)))
    return cases


# ---- private keys ------------------------------------------------------------------------------


def _private_key_cases() -> list[Case]:
    cases = []
    for label in (
        "RSA PRIVATE KEY",
        "EC PRIVATE KEY",
        "PRIVATE KEY",
        "ENCRYPTED PRIVATE KEY",
        "DSA PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
        "PGP PRIVATE KEY BLOCK",
    ):
        lines = _pem_lines()
        body = (lines[1], lines[4], lines[7])
        block = _block(label, lines)
        cases.append(Case("private-key", f"{label}/plain", f"cat id\n{block}\n$ ", body))
        cases.append(Case("private-key", f"{label}/crlf", _block(label, lines, "\r\n"), body))
        cases.append(
            Case("private-key", f"{label}/json-escaped", json.dumps({"key": block + "\n"}), body)
        )
        cases.append(
            Case(
                "private-key",
                f"{label}/yaml-indented",
                "tls:\n  key: |\n    " + block.replace("\n", "\n    ") + "\n",
                body,
            )
        )
        cases.append(
            Case(
                "private-key", f"{label}/one-line", 'KEY="' + block.replace("\n", "\\n") + '"', body
            )
        )
    lines = _pem_lines()
    cases.append(
        Case(
            "private-key",
            "pgp-with-headers",
            _block("PGP PRIVATE KEY BLOCK", ["Version: GnuPG v2", "", *lines]),
            (lines[2], lines[6]),
        )
    )
    lines = _pem_lines()
    cases.append(
        Case(
            "private-key",
            "rsa-encrypted-headers",
            _block(
                "RSA PRIVATE KEY",
                [
                    "Proc-Type: 4,ENCRYPTED",
                    "DEK-Info: AES-128-CBC," + r(32, "0123456789ABCDEF"),
                    "",
                    *lines,
                ],
            ),
            (lines[0], lines[5]),
        )
    )
    putty = [r(64, _B64) for _ in range(6)]
    cases.append(
        Case(
            "private-key",
            "putty-ppk",
            "\n".join(
                [
                    "PuTTY-User-Key-File-3: ssh-ed25519",
                    "Encryption: none",
                    "Comment: deploy",
                    "Public-Lines: 2",
                    putty[0],
                    putty[1],
                    "Private-Lines: 2",
                    putty[2],
                    putty[3],
                    "Private-MAC: " + r(64, _HX),
                ]
            ),
            (putty[2], putty[3]),
        )
    )
    lines = _pem_lines()
    cases.append(
        Case(
            "private-key",
            "gcp-service-account",
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": "acme",
                    "private_key_id": r(40, _HX),
                    "private_key": _block("PRIVATE KEY", lines) + "\n",
                    "client_email": "ci@acme.iam.gserviceaccount.com",
                },
                indent=2,
            ),
            (lines[3], lines[8]),
        )
    )
    lines = _pem_lines()
    cases.append(
        Case(
            "private-key",
            "python-concatenated",
            "KEY = (\n"
            + "\n".join(
                f'    "{x}\\n"'
                for x in [
                    "-----BEGIN RSA PRIVATE KEY-----",
                    *lines,
                    "-----END RSA PRIVATE KEY-----",
                ]
            )
            + "\n)",
            (lines[2], lines[7]),
        )
    )
    lines = _pem_lines()
    cases.append(
        Case(
            "private-key",
            "spaces-for-newlines",
            _block("RSA PRIVATE KEY", lines, " "),
            (lines[2], lines[6]),
        )
    )
    lines = _pem_lines()
    cases.append(
        Case(
            "private-key",
            "truncated-no-footer",
            "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(lines[:5]) + "\n[output truncated]",
            (lines[1], lines[4]),
        )
    )
    return cases


# ---- JWTs ------------------------------------------------------------------------------------


def _jwt_cases() -> list[Case]:
    j1, j2, j3 = _jwt(), _jwt({"iss": "k8s", "sub": "system:serviceaccount:ci"}, "RS256"), _jwt()
    unsigned = _jwt().rsplit(".", 1)[0] + "."
    jwe = ".".join(
        [
            _b64url(json.dumps({"alg": "RSA-OAEP", "enc": "A256GCM"}).encode()),
            r(40, _URL),
            r(16, _URL),
            r(60, _URL),
            r(22, _URL),
        ]
    )
    return [
        Case("jwt", "bare", f"the service replied with {j1}", (j1.split(".")[2], j1)),
        Case(
            "jwt", "cookie", f"Cookie: theme=dark; access_token={j2}; lang=en", (j2.split(".")[2],)
        ),
        Case(
            "jwt",
            "url-fragment",
            f"https://app.example/cb#id_token={j3}&state=x",
            (j3.split(".")[2],),
        ),
        Case("jwt", "unsigned", f"token {unsigned}", (unsigned.split(".")[1],)),
        Case("jwt", "jwe", f"encrypted: {jwe}", (jwe.split(".")[3],)),
    ]


# ---- connection strings and URLs --------------------------------------------------------------


def _url_cases() -> list[Case]:
    cases = []
    for scheme in (
        "postgres",
        "postgresql+psycopg2",
        "mysql",
        "mariadb",
        "mongodb+srv",
        "redis",
        "rediss",
        "amqp",
        "amqps",
        "smtp",
        "smtps",
        "ldap",
        "ldaps",
        "ftp",
        "sftp",
        "ssh",
        "https",
        "http",
        "nats",
        "kafka",
        "clickhouse",
        "cockroachdb",
        "mssql",
        "oracle",
        "couchdb",
        "neo4j+s",
        "s3",
        "imap",
        "pop3",
        "git+https",
        "svn",
    ):
        pw = r(16, _AN + "!$*-_~")
        cases.append(
            Case("url", scheme, f"DSN={scheme}://svc_user:{pw}@db.internal:5432/app", (pw,))
        )
    pw = r(14)
    cases.append(Case("url", "redis-empty-user", f"redis://:{pw}@cache:6379/0", (pw,)))
    pw = r(8) + "@" + r(8)
    cases.append(
        Case(
            "url",
            "at-in-password",
            f"mongodb://root:{pw}@mongo:27017/admin",
            (pw.split("@")[0], pw.split("@")[1]),
        )
    )
    pw = r(10) + "%40" + r(6) + "%23"
    cases.append(Case("url", "percent-encoded-password", f"postgresql://app:{pw}@db/app", (pw,)))
    pw = r(18)
    cases.append(
        Case("url", "ldap-dn-user", f"ldap://cn=admin,dc=acme,dc=org:{pw}@ldap.acme.org", (pw,))
    )
    for param, sep in (("password", "&"), ("pwd", "&"), ("passwd", "&")):
        pw = r(15, _AN + "!#")
        cases.append(
            Case(
                "url",
                f"jdbc-{param}",
                f"jdbc:postgresql://db:5432/app?user=app{sep}{param}={pw}&ssl=true",
                (pw,),
            )
        )
    pw = r(15, _AN + "!@")
    cases.append(
        Case(
            "url",
            "jdbc-sqlserver",
            f"jdbc:sqlserver://db:1433;databaseName=app;user=sa;password={pw};encrypt=true",
            (pw,),
        )
    )
    pw = r(15, _AN + "!")
    cases.append(
        Case(
            "url",
            "ado-net",
            f"Server=tcp:db.acme.net,1433;Database=app;User ID=sa;Password={pw};Encrypt=True;",
            (pw,),
        )
    )
    pw = r(15)
    cases.append(
        Case("url", "odbc", f"DRIVER={{ODBC Driver 18}};SERVER=db;UID=sa;PWD={pw};", (pw,))
    )
    pw = r(12)
    cases.append(Case("url", "oracle-ezconnect", f"sqlplus scott/{pw}@//db:1521/ORCL", (pw,)))
    pw = r(14)
    cases.append(
        Case(
            "url",
            "libpq-keywords",
            f'psql "host=db port=5432 dbname=app user=app password={pw} sslmode=require"',
            (pw,),
        )
    )
    tok = "gh" + "p_" + r(36)
    cases.append(
        Case("url", "git-clone-token-as-user", f"git clone https://{tok}@github.com/a/b", (tok,))
    )
    tok = r(24)
    cases.append(
        Case(
            "url",
            "git-clone-oauth2",
            f"git clone https://oauth2:{tok}@gitlab.example.com/g/p.git",
            (tok,),
        )
    )
    key = r(32, _HX)
    cases.append(
        Case("url", "sentry-dsn", f"SENTRY_DSN=https://{key}@o12345.ingest.sentry.io/678", (key,))
    )
    sec = r(27, _URL)
    cases.append(
        Case("url", "cloudinary", f"CLOUDINARY_URL=cloudinary://123456789012345:{sec}@acme", (sec,))
    )
    return cases


# ---- headers, cookies --------------------------------------------------------------------------


def _header_cases() -> list[Case]:
    c = []
    t = r(40, _URL)
    c.append(Case("header", "bearer", f"Authorization: Bearer {t}", (t,)))
    basic = _b64("deploy:" + r(14))
    c.append(Case("header", "basic", f"authorization: Basic {basic}", (basic,)))
    t = r(40, _HX)
    c.append(Case("header", "token-scheme", f"Authorization: token {t}", (t,)))
    basic = _b64("proxy:" + r(12))
    c.append(Case("header", "proxy-basic", f"Proxy-Authorization: Basic {basic}", (basic,)))
    for h in (
        "X-Api-Key",
        "X-API-KEY",
        "Api-Key",
        "X-Auth-Token",
        "X-Access-Token",
        "Ocp-Apim-Subscription-Key",
        "X-Vault-Token",
        "PRIVATE-TOKEN",
        "X-Goog-Api-Key",
        "X-Figma-Token",
        "X-Shopify-Access-Token",
        "X-RapidAPI-Key",
        "X-Emby-Token",
    ):
        t = r(32, _AN)
        c.append(Case("header", h, f"curl -s -H '{h}: {t}' https://api.example.com/v1", (t,)))
    t = r(32, _AN)
    c.append(
        Case("header", "curl-header-equals", f'curl --header="X-Api-Key: {t}" https://x.io', (t,))
    )
    sid = r(32, _LA)
    c.append(Case("cookie", "cookie-session", f"Cookie: sessionid={sid}; csrftoken=abc", (sid,)))
    sid = r(40, _URL)
    c.append(
        Case("cookie", "set-cookie", f"Set-Cookie: session={sid}; Path=/; HttpOnly; Secure", (sid,))
    )
    sid = r(26, _LA)
    c.append(Case("cookie", "phpsessid", f"Cookie: PHPSESSID={sid}", (sid,)))
    sid = r(32, _HX)
    c.append(
        Case(
            "cookie", "connect-sid", f"curl -b 'connect.sid=s%3A{sid}.{r(20)}' https://x.io", (sid,)
        )
    )
    sid = r(48, _URL)
    c.append(
        Case(
            "cookie",
            "json-cookie",
            json.dumps({"cookies": [{"name": "auth_session", "value": sid}]}),
            (sid,),
        )
    )
    return c


# ---- cloud -----------------------------------------------------------------------------------


def _cloud_cases() -> list[Case]:
    c = []
    sak = r(40, _B64)
    akid = "AK" + "IA" + r(16, _UA)
    c.append(
        Case(
            "cloud",
            "aws-credentials-file",
            f"[default]\naws_access_key_id = {akid}\naws_secret_access_key = {sak}\n",
            (sak, akid),
        )
    )
    sak = r(40, _B64)
    c.append(Case("cloud", "aws-env", f'export AWS_SECRET_ACCESS_KEY="{sak}"', (sak,)))
    st = "IQoJ" + "b3JpZ2luX2Vj" + r(300, _B64)
    c.append(Case("cloud", "aws-session-token", f"AWS_SESSION_TOKEN={st}", (st,)))
    sak = r(40, _B64)
    c.append(
        Case(
            "cloud",
            "aws-sts-json",
            json.dumps(
                {
                    "Credentials": {
                        "AccessKeyId": "AS" + "IA" + r(16, _UA),
                        "SecretAccessKey": sak,
                        "SessionToken": r(200, _B64),
                    }
                },
                indent=4,
            ),
            (sak,),
        )
    )
    sak = r(40, _B64)
    c.append(
        Case("cloud", "aws-cli-configure", f"aws configure set aws_secret_access_key {sak}", (sak,))
    )
    key = r(86, _B64) + "=="
    c.append(
        Case(
            "cloud",
            "azure-storage",
            "DefaultEndpointsProtocol=https;AccountName=acme;"
            f"AccountKey={key};EndpointSuffix=core.windows.net",
            (key[:-2],),
        )
    )
    key = r(43, _B64) + "="
    c.append(
        Case(
            "cloud",
            "azure-service-bus",
            "Endpoint=sb://acme.servicebus.windows.net/;"
            f"SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={key}",
            (key[:-1],),
        )
    )
    sig = urllib.parse.quote(r(43, _B64) + "=", safe="")
    c.append(
        Case(
            "cloud",
            "azure-sas-url",
            f"https://acme.blob.core.windows.net/c/f?sv=2022-11-02&se=2030&sp=r&sig={sig}",
            (sig,),
        )
    )
    sec = r(3, _AN) + "8Q" + "~" + r(34, _URL + "~.")
    c.append(Case("cloud", "azure-client-secret-env", f"AZURE_CLIENT_SECRET={sec}", (sec,)))
    sec = r(34, _AN)
    c.append(Case("cloud", "azure-arm-secret", f"ARM_CLIENT_SECRET: {sec}", (sec,)))
    key = r(32, _HX)
    c.append(
        Case(
            "cloud",
            "azure-openai-key",
            f"curl -H 'api-key: {key}' https://x.openai.azure.com",
            (key,),
        )
    )
    key = r(88, _B64)
    c.append(
        Case(
            "cloud",
            "cosmos-db",
            f"AccountEndpoint=https://acme.documents.azure.com:443/;AccountKey={key}==;",
            (key,),
        )
    )
    sec = r(32, _AN)
    c.append(Case("cloud", "alibaba-secret", f"ALIBABA_CLOUD_ACCESS_KEY_SECRET={sec}", (sec,)))
    key = r(40, _HX)
    c.append(Case("cloud", "gcp-hmac-secret", f"gsutil config: secret_access_key = {key}", (key,)))
    return c


# ---- credential files ---------------------------------------------------------------------------


def _file_cases() -> list[Case]:
    c = []
    t = "npm" + "_" + r(36)
    c.append(Case("file", "npmrc-authtoken", f"//registry.npmjs.org/:_authToken={t}\n", (t,)))
    a = _b64("ci:" + r(16))
    c.append(Case("file", "npmrc-auth", f"_auth = {a}\nemail=ci@acme.io\nalways-auth=true", (a,)))
    p = _b64(r(16))
    c.append(
        Case(
            "file",
            "npmrc-password",
            f"//npm.acme.io/:username=ci\n//npm.acme.io/:_password={p}\n",
            (p,),
        )
    )
    pw = r(18)
    c.append(
        Case(
            "file",
            "pypirc",
            f"[distutils]\nindex-servers = acme\n[acme]\n"
            f"repository = https://pypi.acme.io\nusername = ci\npassword = {pw}\n",
            (pw,),
        )
    )
    pw = r(16, _AN + "!")
    c.append(
        Case(
            "file", "netrc", f"machine api.heroku.com\n  login ci@acme.io\n  password {pw}\n", (pw,)
        )
    )
    pw = r(16)
    c.append(Case("file", "netrc-one-line", f"machine git.acme.io login ci password {pw}", (pw,)))
    tok = r(40, _HX)
    c.append(Case("file", "git-credentials", f"https://ci:{tok}@git.acme.io\n", (tok,)))
    a = _b64("ci:" + r(20))
    c.append(
        Case(
            "file",
            "docker-config",
            json.dumps(
                {"auths": {"registry.acme.io": {"auth": a}, "https://index.docker.io/v1/": {}}},
                indent=2,
            ),
            (a,),
        )
    )
    a = _b64("AWS:" + r(60, _B64))
    c.append(
        Case("file", "docker-config-ecr", '{"auths":{"1.dkr.ecr.aws":{"auth":"' + a + '"}}}', (a,))
    )
    tok = _jwt({"iss": "kubernetes/serviceaccount"}, "RS256")
    c.append(
        Case(
            "file",
            "kubeconfig-token",
            "users:\n- name: ci\n  user:\n    token: " + tok + "\n",
            (tok.split(".")[2],),
        )
    )
    data = _b64(_block("RSA PRIVATE KEY", _pem_lines(4)))
    c.append(
        Case(
            "file",
            "kubeconfig-client-key",
            "users:\n- name: admin\n  user:\n"
            f"    client-certificate-data: {r(60, _B64)}\n    client-key-data: {data}\n",
            (data[40:80],),
        )
    )
    tok = r(32, _LA)
    c.append(Case("file", "kubeconfig-static-token", "    token: " + tok, (tok,)))
    pw = r(16)
    c.append(
        Case(
            "file",
            "kubeconfig-password",
            f"- name: admin\n  user:\n    username: admin\n    password: {pw}\n",
            (pw,),
        )
    )
    s1 = _b64(r(20))
    c.append(
        Case(
            "file",
            "k8s-secret-yaml",
            "apiVersion: v1\nkind: Secret\nmetadata:\n"
            f"  name: db\ntype: Opaque\ndata:\n  username: YWRtaW4=\n  db-pass: {s1}\n",
            (s1,),
        )
    )
    pw = r(16)
    c.append(
        Case(
            "file",
            "nuget-config",
            "<packageSourceCredentials><acme>"
            '<add key="Username" value="ci" />'
            f'<add key="ClearTextPassword" value="{pw}" /></acme></packageSourceCredentials>',
            (pw,),
        )
    )
    pw = r(16)
    c.append(
        Case(
            "file",
            "maven-settings",
            f"<server><id>acme</id><username>ci</username><password>{pw}</password></server>",
            (pw,),
        )
    )
    pw = r(16)
    c.append(Case("file", "gradle-properties", f"mavenUser=ci\nmavenPassword={pw}\n", (pw,)))
    tok = r(40, _AN)
    c.append(
        Case("file", "composer-auth", json.dumps({"github-oauth": {"github.com": tok}}), (tok,))
    )
    tok = r(32, _HX)
    c.append(
        Case(
            "file",
            "terraformrc",
            'credentials "app.terraform.io" {\n  token = "' + tok + '"\n}',
            (tok,),
        )
    )
    pw = r(14)
    c.append(Case("file", "pgpass", f"$ cat ~/.pgpass\ndb.acme.io:5432:app:app_user:{pw}", (pw,)))
    pw = r(14)
    c.append(Case("file", "my-cnf", f'[client]\nuser=root\npassword="{pw}"\nhost=db', (pw,)))
    pw = r(14)
    c.append(Case("file", "htpasswd-plain", f"htpasswd -b -c .htpasswd admin {pw}", (pw,)))
    pw = r(14)
    c.append(Case("file", "wpa-supplicant", f'network={{\n  ssid="home"\n  psk="{pw}"\n}}', (pw,)))
    pw = r(14)
    c.append(Case("file", "smb-credentials", f"username=ci\npassword={pw}\ndomain=ACME", (pw,)))
    return c


# ---- names in many syntaxes ---------------------------------------------------------------------

NAMES = [
    "MY_APP_DB_PASS",
    "secretKey",
    "api-key",
    "DJANGO_SECRET_KEY",
    "SECRET_KEY_BASE",
    "JWT_SIGNING_KEY",
    "ENCRYPTION_KEY",
    "PGPASSWORD",
    "MYSQL_PWD",
    "SMTP_PASS",
    "client_secret",
    "consumerSecret",
    "app_secret",
    "webhookSecret",
    "signing_secret",
    "hmacKey",
    "BOT_TOKEN",
    "refresh_token",
    "NODE_AUTH_TOKEN",
    "TWINE_PASSWORD",
    "VAULT_TOKEN",
    "privateKey",
    "passphrase",
    "masterKey",
    "otp_secret",
    "ADMIN_PWD",
    "db.password",
    "spring.datasource.password",
    "REDIS_AUTH",
    "apiSecret",
    "X_API_KEY",
    "accessKeySecret",
    "auth_token",
    "sessionSecret",
    "cookie_secret",
    "LICENSE_KEY",
    "pin",
    "PIN_CODE",
    "keystorePassword",
    "ansible_become_pass",
]

SYNTAXES = [
    ("shell", "export {k}={v}"),
    ("shell-quoted", "export {k}='{v}'"),
    ("env", "{k}={v}"),
    ("yaml", "  {k}: {v}"),
    ("yaml-quoted", '  {k}: "{v}"'),
    ("json", '{{"{k}": "{v}", "x": 1}}'),
    ("toml", '{k} = "{v}"'),
    ("ini", "{k} = {v}"),
    ("xml", "<{k}>{v}</{k}>"),
    ("xml-attr", '<setting name="{k}" value="{v}"/>'),
    ("hcl", '  {k} = "{v}"'),
    ("python", '{k} = "{v}"'),
    ("python-kwarg", 'connect(host="db", {k}="{v}")'),
    ("js", "const cfg = {{ {k}: '{v}' }};"),
    ("php", "define('{k}', '{v}');"),
    ("php-array", "'{k}' => '{v}',"),
    ("go", '{k}: "{v}",'),
    ("java-properties", "{k}={v}"),
    ("docker-compose", "      - {k}={v}"),
    ("github-actions", "          {k}: {v}"),
    ("cli-equals", "app --{k}={v}"),
    ("cli-space", "app --{k} {v}"),
    ("docker-env", "docker run -e {k}={v} acme/app"),
    ("kubectl", "kubectl create secret generic app --from-literal={k}={v}"),
    ("helm", "helm install app ./chart --set auth.{k}={v}"),
    ("java-d", "java -D{k}={v} -jar app.jar"),
]


def _assignment_cases() -> list[Case]:
    c = []
    for key in NAMES:
        for syntax, template in SYNTAXES:
            if syntax == "php" and "." in key:
                continue
            v = r(12, _AN) + _rng.choice("&;)<>]}!#%^*(") + r(6, _AN)
            if key.lower().startswith("pin"):
                v = r(8, _D)
            c.append(Case("assignment", f"{key}/{syntax}", template.format(k=key, v=v), (v,)))
    return c


# ---- commands --------------------------------------------------------------------------------


def _command_cases() -> list[Case]:
    c = []

    def add(name: str, template: str, alphabet: str = _AN, n: int = 14) -> None:
        v = r(n, alphabet)
        c.append(Case("command", name, template.format(v=v), (v,)))

    add("mysql-p", "mysql -h db -u root -p{v} shop")
    add("mysql-password-eq", "mysql --password={v} -u root")
    add("mysql-p-quoted", "mysql -uroot -p'{v}' -e 'select 1'")
    add("mysqldump", "mysqldump -u backup --password {v} shop > shop.sql")
    add("sshpass", "sshpass -p '{v}' ssh deploy@host")
    add("sshpass-env", "SSHPASS={v} sshpass -e ssh deploy@host")
    add("curl-u", "curl -u deploy:{v} https://ci.acme.io/api")
    add("curl-user", "curl --user 'deploy:{v}' https://ci.acme.io/api")
    add("curl-u-token-only", "curl -u {v}: https://api.stripe.com/v1/charges")
    add("wget-password", "wget --user=ci --password={v} https://files.acme.io/a.tgz")
    add("wget-http-password", "wget --http-user=ci --http-password={v} https://x.io/a")
    add("docker-login-p", "docker login -u ci -p {v} registry.acme.io")
    add("docker-login-stdin", "echo {v} | docker login -u ci --password-stdin registry.acme.io")
    add("psql-env", "PGPASSWORD={v} psql -h db -U app")
    add("redis-cli-a", "redis-cli -h cache -a {v} ping")
    add("mongosh", "mongosh --username admin --password {v} mongodb://db")
    add("sqlcmd", "sqlcmd -S db -U sa -P {v} -Q 'select 1'")
    add("openssl-passin", "openssl rsa -in key.pem -passin pass:{v} -out plain.pem")
    add("openssl-passout", "openssl genrsa -aes256 -passout pass:{v} 4096")
    add("zip-P", "zip -P {v} backup.zip db.sql")
    add("7z-p", "7z a -p{v} backup.7z db.sql")
    add("unzip-P", "unzip -P {v} backup.zip")
    add("smbclient", "smbclient //nas/share -U ci%{v}")
    add("mount-cifs", "mount -t cifs //nas/s /mnt -o username=ci,password={v}")
    add("ssh-keygen-N", "ssh-keygen -t ed25519 -N '{v}' -f id_deploy")
    add("gpg-passphrase", "gpg --batch --passphrase {v} -d secrets.gpg")
    add("keytool", "keytool -importcert -keystore ks.jks -storepass {v} -noprompt")
    add("rabbitmqctl", "rabbitmqctl add_user ci {v}")
    add("chpasswd", "echo 'deploy:{v}' | chpasswd")
    add("useradd-p", "usermod --password {v} deploy")
    add("vault-login", "vault login token={v}")
    add("npm-config", "npm config set //registry.npmjs.org/:_authToken {v}")
    add("yarn-config", "yarn config set npmAuthToken {v}")
    add("poetry-config", "poetry config http-basic.acme ci {v}")
    add("twine", "twine upload -u ci -p {v} dist/*")
    add("gh-auth", "echo {v} | gh auth login --with-token")
    add("az-login", "az login --service-principal -u app -p {v} --tenant acme")
    add("heroku-env", "heroku config:set STRIPE_KEY={v}")
    add(
        "git-config-url",
        "git config --global url.https://ci:{v}@git.acme.io/.insteadOf https://git.acme.io/",
    )
    add("htpasswd-B", "htpasswd -bB users.htpasswd admin {v}")
    add("sql-create-user", "CREATE USER app IDENTIFIED BY '{v}';")
    add("sql-alter-user", "ALTER USER postgres WITH PASSWORD '{v}';")
    add("sql-set-password", "SET PASSWORD FOR 'app'@'%' = '{v}';")
    add("net-use", "net use \\\\nas\\share /user:ACME\\ci {v}")
    add("ldapsearch", "ldapsearch -x -D cn=admin,dc=acme -w {v} -b dc=acme")
    add("expect-send", 'expect -c \'spawn ssh host; expect "password:"; send "{v}\\r"\'')
    return c


# ---- credentials in words ---------------------------------------------------------------------

# (language, template): every template states a credential; {v} is the value.
WORD_TEMPLATES = [
    ("en", "my password is {v}"),
    ("en", "The staging DB password is {v} - don't share it."),
    ("en", "the wifi passphrase is {v}"),
    ("en", "Use the password {v} for the admin panel."),
    ("en", "password: {v}"),
    ("en", "The PIN is {v}."),
    ("en", "my pin code is {v}"),
    ("en", "Log in as admin with password {v}"),
    ("en", "I set the root password to {v} yesterday."),
    ("en", "the secret is {v}"),
    ("en", "our API key is {v}"),
    ("en", "the passcode for the door is {v}"),
    ("de", "mein Passwort ist {v}"),
    ("de", "Das Kennwort lautet {v}."),
    ("de", "Das WLAN-Passwort ist {v}"),
    ("fr", "mon mot de passe est {v}"),
    ("fr", "Le mot de passe du serveur est {v}."),
    ("fr", "le code PIN est {v}"),
    ("es", "mi contraseña es {v}"),
    ("es", "La contraseña del wifi es {v}"),
    ("pt", "minha senha é {v}"),
    ("pt", "A senha do banco é {v}."),
    ("it", "la password è {v}"),
    ("ru", "мой пароль {v}"),
    ("ru", "Пароль: {v}"),
    ("ru", "пароль от базы — {v}"),
    ("zh", "我的密码是{v}"),
    ("zh", "数据库密码：{v}"),
    ("zh", "wifi密码是 {v}"),
    ("ja", "パスワードは{v}です"),
    ("ja", "私のパスワードは {v} です。"),
    ("nl", "mijn wachtwoord is {v}"),
    ("pl", "moje hasło to {v}"),
    ("ko", "비밀번호는 {v} 입니다"),
]
WORD_VALUES = [
    "sunshine",
    "correcthorse",
    "Tr0ub4dor&3",
    "hunter2",
    "bluebird",
    "Geheim!",
    "soleil",
    "girasol",
    "podsolnukh",
    "Sonnenblume7",
]


def _word_cases() -> list[Case]:
    c = []
    for n, (lang, template) in enumerate(WORD_TEMPLATES):
        v = WORD_VALUES[n % len(WORD_VALUES)]
        if "pin" in template.lower() or "PIN" in template:
            v = r(6, _D)
        elif any(word in template for word in ("secret", "API key")):
            v = r(24)  # a word is a password only after a password noun (docs/robustness.md)
        c.append(Case("words", f"{lang}/{n}", template.format(v=v), (v,)))
    c.append(
        Case(
            "words",
            "passphrase-multi-word",
            'The backup passphrase is "correct horse battery staple".',
            ("correct horse battery staple", "horse battery"),
        )
    )
    return c


# ---- encoded forms ---------------------------------------------------------------------------


def _encoded_cases() -> list[Case]:
    c = []
    t = "gh" + "p_" + r(36)
    c.append(
        Case(
            "encoded",
            "percent-token",
            "next=" + urllib.parse.quote(f"https://x.io/?token={t}", safe=""),
            (t[4:],),
        )
    )
    pw = r(10) + "!@#" + r(4)
    form = urllib.parse.urlencode({"user": "bob", "password": pw})
    c.append(
        Case("encoded", "form-body", f"POST /login body={form}", (urllib.parse.quote_plus(pw),))
    )
    t = "gh" + "p_" + r(36)
    c.append(Case("encoded", "base64-token-no-hint", f"value: {_b64(t)}", (_b64(t),)))
    pw = r(16)
    c.append(
        Case(
            "encoded",
            "base64-assignment",
            f"echo {_b64('DB_PASSWORD=' + pw)} | base64 -d",
            (_b64("DB_PASSWORD=" + pw),),
        )
    )
    t = "sk" + "-proj-" + r(48, _URL)
    hexed = t.encode().hex()
    c.append(Case("encoded", "hex-token", f"echo {hexed} | xxd -r -p", (hexed,)))
    t = "gh" + "p_" + r(36)
    uni = "".join(f"\\u{ord(ch):04x}" for ch in t)
    c.append(Case("encoded", "unicode-escaped-token", '{"t": "' + uni + '"}', (uni[:60],)))
    pw = r(14)
    c.append(Case("encoded", "unicode-escaped-key", '{"\\u0070assword": "' + pw + '"}', (pw,)))
    t = "gh" + "p_" + r(36)
    c.append(Case("encoded", "json-escaped-slashes", json.dumps({"cmd": f'export T="{t}"'}), (t,)))
    pw = r(14)
    c.append(Case("encoded", "html-entities", f'<input name="password" value="{pw}">', (pw,)))
    t = "xo" + "xb-" + r(12, _D) + "-" + r(13, _D) + "-" + r(24)
    c.append(
        Case(
            "encoded",
            "url-in-query",
            "https://x.io/r?u=" + urllib.parse.quote(f"https://hook?t={t}", safe=""),
            (t[5:],),
        )
    )
    return c


def _second_wave() -> list[Case]:
    """Forms tried after the first fixes: hashes, more languages, seed phrases, cut tokens,
    block scalars, shells and languages not tried before."""
    c: list[Case] = []

    def add(cls: str, name: str, text: str, *secrets: str) -> None:
        c.append(Case(cls, f"w2/{name}", text, secrets))

    h = r(53, "./" + _AN)
    add("hash", "shadow", f"root:$6$rounds=5000$saltsalt${h}:19000:0:99999:7:::", h)
    h = r(53, "./" + _AN)
    add("hash", "bcrypt", f"hash = '$2b$12${h}'", h)
    h = r(22, "./" + _AN)
    add("hash", "apr1", f"admin:$apr1$abcdefgh${h}", h)
    h = r(43, "./" + _AN)
    add("hash", "yescrypt", f"deploy:$y$j9T$abcdefghijklmnop${h}:19500::::::", h)
    t = "xo" + "xc-" + "-".join(r(12, _D) for _ in range(3)) + "-" + r(64, _HX)
    add("provider", "slack-xoxc", f"token {t}", t)
    t = "xo" + "xd-" + r(100, _URL)
    add("provider", "slack-xoxd", f"d={t}", t)
    t = "mf" + "a." + r(84, _URL)
    add("provider", "discord-mfa", f"token {t}", t)
    words = "abandon ability able about above absent absorb abstract absurd abuse access".split()
    phrase = " ".join([*words, "accident"])
    add("words", "seed-phrase", f"my seed phrase is {phrase}", " ".join(words[3:9]))
    add("words", "recovery-phrase", f"Recovery phrase: {phrase}", " ".join(words[3:9]))
    add("words", "mnemonic", f'MNEMONIC="{phrase}"', " ".join(words[3:9]))
    add("words", "it-word", "la mia password è girasole", "girasole")
    add("words", "capitalised", "The password is Sunflower.", "Sunflower")
    t = "gh" + "p_" + r(36)
    add("truncated", "end-of-output", f"output: {t[:14]}", t[4:14])
    t = "gh" + "p_" + r(36)
    add("truncated", "ellipsis", f"token={t[:20]}...", t[4:20])
    t = "sk" + "-proj-" + r(60, _URL)
    add("truncated", "marked", f"key {t[:24]} [output truncated]", t[8:24])
    for name, template in (
        ("form-body", "username=bob&password={v}&remember=1"),
        ("env-comment", "DB_PASSWORD='{v}' # prod"),
        ("yaml-block", "password: |\n  {v}\nuser: x"),
        ("yaml-folded", "password: >-\n  {v}\n"),
        ("json-spaced", '{{"password" : "{v}"}}'),
        ("proxy-url", "HTTPS_PROXY=http://bob:{v}@proxy:3128"),
        ("ssh-prose", "ssh password for deploy@web1 is {v}"),
        ("pw-abbrev", "pw: {v}"),
        ("pass-abbrev", "user: admin / pass: {v}"),
        ("login-pair", "login admin / {v}"),
        ("creds-colon", "credentials: admin:{v}"),
        ("creds-slash", "creds are admin/{v}"),
        ("pgpassword-inline", "env PGPASSWORD={v} pg_dump app"),
        ("sql-connect", "CONNECT scott/{v}@orcl"),
        ("psql-conninfo", "psql 'postgresql://app@db/app?password={v}'"),
        ("ini-section", "[database]\npasswd={v}"),
        ("powershell", "$password = ConvertTo-SecureString '{v}' -AsPlainText -Force"),
        ("powershell-env", '$env:DB_PASSWORD = "{v}"'),
        ("cmd-set", "set DB_PASSWORD={v}"),
        ("fish-set", "set -x DB_PASSWORD {v}"),
        ("rust", 'let password = String::from("{v}");'),
        ("java", 'String dbPassword = "{v}";'),
        ("csharp", 'var connStr = "Server=db;User Id=sa;Password={v};";'),
        ("ruby", "config.password = '{v}'"),
        ("kotlin", 'val apiSecret = "{v}"'),
        ("swift", 'let apiToken = "{v}"'),
        ("properties-colon", "db.password: {v}"),
        ("nested-yaml", "spring:\n  datasource:\n    password: {v}"),
        ("it-server", "la password del server è {v}"),
        ("tr", "şifrem {v}"),
        ("sv", "lösenordet är {v}"),
        ("no", "passordet er {v}"),
        ("ar", "كلمة المرور هي {v}"),
        ("hi", "मेरा पासवर्ड {v} है"),
        ("vi", "mật khẩu là {v}"),
        ("id", "kata sandi saya {v}"),
        ("uk", "мій пароль {v}"),
        ("cs", "heslo je {v}"),
        ("el", "ο κωδικός είναι {v}"),
        ("he", "הסיסמה היא {v}"),
    ):
        v = r(13)
        add("more", name, template.format(v=v), v)
    for name, template in (
        ("dd-api-key", "DD_API_KEY={v}"),
        ("github-webhook-secret", "GITHUB_WEBHOOK_SECRET={v}"),
        ("encryption-key", "encryption key: {v}"),
        ("x-amz-security-token", "X-Amz-Security-Token: {v}"),
        ("session-param", "session={v}"),
    ):
        v = r(64, _HX) if "key" in name else r(40)
        add("more", name, template.format(v=v), v)
    t = "sk" + "-proj-" + r(60, _URL)
    add("more", "token-in-path", f"GET /v1/keys/{t}/usage", t)
    t = r(44, _B64)
    add("more", "wireguard", f"[Interface]\nPrivateKey = {t}=\nAddress = 10.0.0.1/24", t)
    return c


_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _wif(compressed: bool) -> str:
    """A Bitcoin private key in Wallet Import Format (base58 with its checksum), random."""
    import hashlib

    body = bytes([0x80]) + _rng.randbytes(32) + (b"\x01" if compressed else b"")
    raw = body + hashlib.sha256(hashlib.sha256(body).digest()).digest()[:4]
    number, out = int.from_bytes(raw, "big"), ""
    while number:
        number, rest = divmod(number, 58)
        out = _BASE58[rest] + out
    return out


def _third_wave() -> list[Case]:
    """Forms an attack pass on issue 20 found stored verbatim: a private JSON Web Key, a
    wallet key, a Bitcoin WIF key, what a secret file holds, an SNMP community, a salt,
    numbers under secret names, a bare three-part bot token."""
    c: list[Case] = []

    def add(cls: str, name: str, text: str, *secrets: str) -> None:
        c.append(Case(cls, f"w3/{name}", text, secrets))

    d, p, q = r(43, _URL), r(86, _URL), r(86, _URL)
    jwk = {"kty": "RSA", "kid": "sig-1", "n": r(342, _URL), "e": "AQAB", "d": d, "p": p, "q": q}
    add("private-key", "jwk-rsa", json.dumps(jwk, indent=2), d, p, q)
    d = r(43, _URL)
    ec = {"kty": "EC", "crv": "P-256", "x": r(43, _URL), "y": r(43, _URL), "d": d}
    add("private-key", "jwk-ec", "jwk = " + json.dumps(ec), d)
    k = r(43, _URL)
    add("private-key", "jwk-oct", json.dumps({"keys": [{"kty": "oct", "k": k, "alg": "HS256"}]}), k)
    key = "0x" + r(64, _HX)
    add("cloud", "wallet-hex", f"wallet: {key}", key[2:])
    add("cloud", "eth-private-key-env", f"ETH_PRIVATE_KEY={key}", key[2:])
    wif = _wif(compressed=False)
    add("cloud", "bitcoin-wif", f"WIF private key (wallet export): {wif}", wif)
    wif = _wif(compressed=True)
    add("cloud", "bitcoin-wif-compressed", f"bitcoin-cli importprivkey {wif} main", wif)
    master = r(32, _HX)
    add("file", "rails-master-key", f"$ cat config/master.key\n{master}\n$ ls", master)
    vault = r(8, _L) + "&" + r(6)
    add("file", "ansible-vault-pass", f"$ cat ~/.vault_pass.txt\n{vault}", vault)
    community = r(14)
    add("command", "snmpwalk-community", f"snmpwalk -v2c -c {community} 10.0.0.1 system",
        community)  # fmt: skip
    auth = r(16)
    add("command", "snmpget-v3", f"snmpget -v3 -l authPriv -u ops -a SHA -A {auth} host sysName",
        auth)  # fmt: skip
    salt = r(32, _HX)
    add("assignment", "hash-salt", f"HASH_SALT={salt}", salt)
    add("assignment", "json-salt", json.dumps({"password_salt": salt}), salt)
    number = "9" + r(10, _D)
    add("assignment", "json-number-password", '{"db_password": ' + number + ', "pin": 4821}',
        number, "4821")  # fmt: skip
    add("assignment", "code-number-password", f"DB_PASSWORD = {number}", number)
    bot = r(24, _URL) + "." + r(6, _URL) + "." + r(38, _URL)
    add("provider", "bare-bot-token", f"Done. Use {bot} to start the bot.", bot)
    return c


def _build() -> list[Case]:
    cases = [
        *_provider_cases(),
        *_private_key_cases(),
        *_jwt_cases(),
        *_url_cases(),
        *_header_cases(),
        *_cloud_cases(),
        *_file_cases(),
        *_assignment_cases(),
        *_command_cases(),
        *_word_cases(),
        *_encoded_cases(),
        *_second_wave(),
        *_third_wave(),
    ]
    for case in cases:
        for s in case.secrets:
            assert s in case.text, case.name
    return cases


CASES: list[Case] = _build()


def _windows(secret: str, width: int = 10) -> list[str]:
    if len(secret) <= width:
        return [secret]
    return [secret[i : i + width] for i in range(len(secret) - width + 1)]


def _survives(window: str, whole: bool, out: str) -> bool:
    """Whether ``window`` is in ``out``; a secret shorter than a window (a 4-digit PIN) counts
    only as a token of its own: "4821" inside a millisecond timestamp or a random id is not it."""
    if not whole:
        return window in out
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(window)}(?![A-Za-z0-9])", out) is not None


def leaks(case: Case, out: str) -> list[str]:
    """The pieces of ``case``'s secrets that survive in ``out`` (10-character windows, or the
    whole secret when shorter): a secret cut at a special character leaks its tail."""
    found = []
    for secret in case.secrets:
        whole = len(secret) < 10
        for window in _windows(secret):
            if _survives(window, whole, out) and window not in _CONTEXT_OF[case.name]:
                found.append(window)
                break
    return found


class LeakFinder:
    """`leaks` over many texts at once: every 10-character window of the texts is hashed once,
    so each window of each secret costs a set lookup (a hit is then checked for real)."""

    def __init__(self, texts: dict[str, str], width: int = 10) -> None:
        self.texts = texts
        self.width = width
        self.joined = "\x00".join(texts.values())
        j = self.joined
        self.grams = {hash(j[i : i + width]) for i in range(len(j) - width + 1)}

    def leaked(self, cases: list[Case]) -> list[tuple[str, str]]:
        """(text name, case name) of every case a piece of which survives in a text."""
        found = []
        for case in cases:
            suspect = False
            for secret in case.secrets:
                if len(secret) < self.width:
                    suspect = suspect or secret in self.joined
                elif any(hash(w) in self.grams for w in _windows(secret, self.width)):
                    suspect = True
            if suspect:
                found.extend((name, case.name) for name, text in self.texts.items()
                             if leaks(case, text))  # fmt: skip
        return found


def _context(case: Case) -> str:
    """The case's text without its secrets: a window found there is not a leak."""
    text = case.text
    for secret in sorted(case.secrets, key=len, reverse=True):
        text = text.replace(secret, "\x00")
    return text


_CONTEXT_OF = {case.name: _context(case) for case in CASES}


# ---- texts about secrets that hold none ---------------------------------------------------------

NEAR_MISSES: list[str] = [
    "The password is required.",
    "Reset your password from the account page.",
    "The password must be at least 12 characters long.",
    "password: ********",
    "Please enter your password.",
    "Forgot your password? Click the link.",
    "the password was changed yesterday",
    "my password is too short",
    "The password is wrong",
    "Das Passwort ist falsch.",
    "Le mot de passe est incorrect.",
    "La contraseña es obligatoria.",
    "A senha é obrigatória.",
    "密码错误",
    "パスワードが違います",
    "Пароль неверный",
    "export DB_PASSWORD=$DB_PASSWORD",
    "password = os.environ['DB_PASSWORD']",
    "api_key: ${{ secrets.API_KEY }}",
    "token: <your-token-here>",
    "API_KEY=your_api_key_here",
    "The PIN is printed on the back of the card.",
    "max_tokens: 4096",
    "Tokenization splits text into tokens.",
    "The secret to good code is small functions.",
    "passphrase-protected keys are safer",
    "mysql -u root -p",
    "git clone https://github.com/acme/app.git",
    "postgres://localhost:5432/app",
    "Authorization: Bearer <token>",
    "-----BEGIN PUBLIC KEY-----",
    "sha256:" + "0" * 8 + "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"[8:],
    # near the second wave's rules
    "session=ProductionSession",
    "login admin/settings",
    "set -x PATH /usr/bin",
    "It costs $2 per month, $5$ with tax",
    "Use ConvertTo-SecureString to build one",
    "the private key is stored in vault",
    "the seed phrase is important",
    "log in with username/password",
    "the encryption key is rotated daily",
    "master key: see the vault",
    "set password for user",
    "Set the password to expire in 90 days",
    "ghp_ tokens look like this",
    "skip the hf_transfer step",
    "heslo je špatné",
    "Lösenordet är fel",
    "şifre yanlış",
    "mnemonic: a sequence of words",
    "backup phrase is written on paper somewhere safe",
    "The password is strong.",
    "my password is too weak",
    "the password manager is Bitwarden",
]
