"""Kafka principals: `User:<name>`, from a SASL login or from the client
certificate's subject through `ssl.principal.mapping.rules`
(Kafka's SslPrincipalMapper)."""
from __future__ import annotations

import re

from broker.config.types import ConfigError

ANONYMOUS = "User:ANONYMOUS"

# Kafka's SslPrincipalMapper.RULE_PARSER, in Python's dialect (compiled by the first mapper given
# rules: every broker builds one, most with the default, which needs no parsing)
_RULE = r"((DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?))(,\s*|$)"


class NoMatchingRule(Exception):
    pass


class _Rule:
    def __init__(self, pattern=None, replacement=None, case=""):
        self.default = pattern is None
        if not self.default:
            self.pattern = re.compile(pattern.replace("\\/", "/"))
            # Java's Matcher.replaceAll writes groups as $1
            self.replacement = re.sub(r"\$(\d+)", r"\\g<\1>", replacement.replace("\\/", "/"))
            self.case = case

    def apply(self, dn: str) -> str | None:
        if self.default:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        out = self.pattern.sub(self.replacement, dn)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


class SslPrincipalMapper:
    def __init__(self, rules: str | None):
        self.rules = []
        text = (rules or "DEFAULT").strip()
        if text == "DEFAULT":
            self.rules.append(_Rule())
            return
        parser = re.compile(_RULE)
        pos = 0
        while pos < len(text):
            m = parser.match(text, pos)
            if not m or m.end() == pos:
                break
            if m.group(8):
                raise ConfigError(f"Invalid rule: {m.group(8)}")
            if m.group(2):
                self.rules.append(_Rule())
            elif m.group(3) is not None:
                self.rules.append(_Rule(m.group(3), m.group(5), m.group(7) or ""))
            pos = m.end()
        if not self.rules:
            self.rules.append(_Rule())

    def principal_name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {dn}, rules {[r for r in self.rules]}")


def certificate_dn(der: bytes) -> str:
    """The subject of a DER certificate as Java's X500Principal.getName() writes it (RFC 2253)."""
    from cryptography import x509
    cert = x509.load_der_x509_certificate(der)
    return cert.subject.rfc4514_string()
