"""A certificate's validity dates from its DER bytes, for the tls check.

Why a module of its own: the standard library decodes a peer certificate only after verifying it
(``getpeercert()`` is empty under ``CERT_NONE``), and a self-signed or internal certificate
(``verify: false``) still needs its days left. ``cryptography`` is not a dependency; the dates
sit at a fixed place in every X.509 certificate (RFC 5280 §4.1: Certificate → tbsCertificate →
[version], serialNumber, signature, issuer, validity), so a few lines of DER walking read them.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

log = logging.getLogger(__name__)

__all__ = ["CertificateError", "validity"]

_SEQUENCE, _INTEGER, _VERSION, _UTC_TIME, _GENERALIZED_TIME = 0x30, 0x02, 0xA0, 0x17, 0x18


class CertificateError(ValueError):
    """The bytes are not a DER X.509 certificate this reader understands."""


def _tlv(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of value, end of value) of the element at ``pos``."""
    if pos + 2 > len(der):
        raise CertificateError("certificate cut short")
    tag, length = der[pos], der[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        if not 1 <= n <= 4 or pos + n > len(der):
            raise CertificateError("bad DER length")
        length = int.from_bytes(der[pos:pos + n], "big")
        pos += n
    if pos + length > len(der):
        raise CertificateError("certificate cut short")
    return tag, pos, pos + length


def _expect(der: bytes, pos: int, tag: int, what: str) -> tuple[int, int]:
    found, start, end = _tlv(der, pos)
    if found != tag:
        raise CertificateError(f"not an X.509 certificate ({what}: tag 0x{found:02x})")
    return start, end


def _time(der: bytes, pos: int) -> tuple[datetime, int]:
    tag, start, end = _tlv(der, pos)
    text = der[start:end].decode("ascii", "replace")
    try:
        if tag == _UTC_TIME:  # YYMMDDHHMMSSZ; RFC 5280: 50-99 are 19xx
            when = datetime.strptime(text, "%y%m%d%H%M%SZ")
            if when.year >= 2050:
                when = when.replace(year=when.year - 100)
        elif tag == _GENERALIZED_TIME:
            when = datetime.strptime(text, "%Y%m%d%H%M%SZ")
        else:
            raise CertificateError(f"validity: unexpected tag 0x{tag:02x}")
    except ValueError as exc:
        raise CertificateError(f"validity: bad time {text!r}") from exc
    return when.replace(tzinfo=UTC), end


def validity(der: bytes) -> tuple[datetime, datetime]:
    """(notBefore, notAfter), timezone-aware UTC; :class:`CertificateError` on anything else."""
    start, _ = _expect(der, 0, _SEQUENCE, "certificate")
    pos, _ = _expect(der, start, _SEQUENCE, "tbsCertificate")
    tag, _, end = _tlv(der, pos)
    if tag == _VERSION:
        pos = end
    _, pos = _expect(der, pos, _INTEGER, "serialNumber")
    _, pos = _expect(der, pos, _SEQUENCE, "signature")
    _, pos = _expect(der, pos, _SEQUENCE, "issuer")
    start, _ = _expect(der, pos, _SEQUENCE, "validity")
    not_before, pos = _time(der, start)
    not_after, _ = _time(der, pos)
    return not_before, not_after
