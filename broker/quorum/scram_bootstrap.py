"""`kafka-storage.sh format --add-scram` (KIP-900): SCRAM credentials written into
bootstrap.checkpoint, so the first active controller commits them with metadata.version and brokers
can log in to each other with SCRAM from the start (the usual way to use SCRAM for inter-broker
traffic; credentials are otherwise only created through a running cluster).

Syntax as Kafka's ScramParser: `SCRAM-SHA-256=[name=alice,password=alice-secret]`, optional
`iterations=8192` and `salt=<base64>` (or `saltedpassword=<base64>` with a salt), values optionally
in double quotes."""
from __future__ import annotations

import base64
import os
import re

from kproto.metadata.user_scram_credential_record import UserScramCredentialRecord

from broker.security import sasl

DEFAULT_ITERATIONS = 4096
_ENTRY = re.compile(r"\s*(SCRAM-SHA-256|SCRAM-SHA-512)\s*=\s*\[(.*)\]\s*\Z", re.S)


class ScramFormatError(ValueError):
    pass


def _options(body: str) -> dict:
    out = {}
    for part in re.findall(r'(?:[^,"]|"[^"]*")+', body):
        key, eq, value = part.partition("=")
        if not eq:
            raise ScramFormatError(f"Invalid configuration for {part}: expected key=value")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        out[key.strip()] = value
    return out


def parse(text: str) -> UserScramCredentialRecord:
    m = _ENTRY.match(text)
    if not m:
        raise ScramFormatError(f"Invalid SCRAM credential {text!r}: expected "
                               "SCRAM-SHA-256=[name=<user>,password=<password>] (or SCRAM-SHA-512)")
    mechanism = m.group(1)
    opts = _options(m.group(2))
    name = opts.get("name")
    if not name:
        raise ScramFormatError(f"You must supply 'name' to add-scram: {text}")
    iterations = int(opts.get("iterations", DEFAULT_ITERATIONS))
    if not 4096 <= iterations <= 16384:
        raise ScramFormatError(f"The 'iterations' value must be >= 4096 and <= 16384 for add-scram: {text}")
    salt = base64.b64decode(opts["salt"]) if "salt" in opts else os.urandom(32)
    mech_id, hash_name = sasl.SCRAM_MECHANISMS[mechanism]
    if "saltedpassword" in opts:
        if "salt" not in opts:
            raise ScramFormatError(f"You must supply 'salt' with 'saltedpassword' to add-scram: {text}")
        salted = base64.b64decode(opts["saltedpassword"])
    elif "password" in opts:
        salted = sasl.salted_password(opts["password"], salt, iterations, hash_name)
    else:
        raise ScramFormatError(f"You must supply one of 'password' or 'saltedpassword' to add-scram: {text}")
    stored, server = sasl.scram_keys(salted, hash_name)
    return UserScramCredentialRecord(name=name, mechanism=mech_id, salt=salt, stored_key=stored,
                                     server_key=server, iterations=iterations)
