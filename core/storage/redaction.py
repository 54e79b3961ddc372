"""URLs as every output shows them: without the credentials some carry.

An image URL may hold a password (`https://user:pass@host/...`) or be presigned (S3's
X-Amz-Signature, GCS's X-Goog-Signature, CloudFront's Signature, Azure's sig=, a token=):
whoever reads a dead letter, report.html, a receipt, the console or an example's
`image/source_id` could fetch with them. `redacted` replaces the userinfo and the value of
each such query parameter with REDACTED, keeping the rest as written (the parameter's
name stays, to say what was there); `redact_urls` does so for each URL in a text. Only
what is shown is redacted: the request itself uses the URL as written.
"""

from __future__ import annotations

import re
import urllib.parse

REDACTED = "REDACTED"
# Query parameters that are credentials, by name in lower case: presigned S3 (both
# signature versions), GCS, CloudFront and Azure SAS URLs, and the usual API keys.
_SECRET_PARAMETERS = frozenset(
    {
        "sig",
        "signature",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "awsaccesskeyid",
        "x-goog-signature",
        "x-goog-credential",
        "googleaccessid",
        "policy",
        "key-pair-id",
        "token",
        "access_token",
        "id_token",
        "refresh_token",
        "api_key",
        "apikey",
        "key",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "auth",
        "authorization",
    }
)
# Names that hold one of these words are credentials too (X-Amz-Security-Token, sas_token).
_SECRET_WORDS = re.compile(r"signature|token|secret|password|credential", re.IGNORECASE)
# The longest scheme a URL in text is matched from (registered ones have up to ~40
# characters; a longer run is matched from its last 64, and redacted the same). Unbounded,
# each letter of a long run not followed by "://" began a scan to the run's end: a
# manifest line of 1 MiB of letters with a URL after them took minutes to redact.
MAX_SCHEME_CHARS = 64
# A URL inside free text (a message, a manifest's line): it ends at whitespace, a quote,
# an angle bracket or a comma (a CSV's next field), and not on punctuation that follows
# it in a sentence ("...?sig=abc: cannot connect").
_URL_IN_TEXT = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]{0,%d}://[^\s\"'<>,]*[^\s\"'<>,.:;!?)]"  # noqa: UP031 - braces read plainly
    % (MAX_SCHEME_CHARS - 1)
)


def redacted(uri: str) -> str:
    """`uri` with its userinfo and credential query values replaced by REDACTED; anything
    that is not a URL is returned as it is."""
    scheme_end = uri.find("://")
    if scheme_end < 0:
        return uri
    start = scheme_end + 3
    authority_end = next(
        (index for index in range(start, len(uri)) if uri[index] in "/?#"), len(uri)
    )
    authority = uri[start:authority_end]
    if "@" in authority:
        authority = f"{REDACTED}@{authority.rsplit('@', 1)[1]}"
    rest = uri[authority_end:]
    path, question, query = rest.partition("?")
    if question:
        query, hash_sign, fragment = query.partition("#")
        query = "&".join(map(_redacted_parameter, query.split("&"))) + hash_sign + fragment
    return f"{uri[:start]}{authority}{path}{question}{query}"


def redact_urls(text: str) -> str:
    """`text` with each URL in it redacted."""
    return _URL_IN_TEXT.sub(lambda found: redacted(found.group()), text) if "://" in text else text


def _redacted_parameter(parameter: str) -> str:
    name, equals, value = parameter.partition("=")
    plain = urllib.parse.unquote_plus(name)
    if equals and value and (plain.lower() in _SECRET_PARAMETERS or _SECRET_WORDS.search(plain)):
        return f"{name}={REDACTED}"
    return parameter
