"""`kproto user create|delete|list`: SCRAM credentials as kafka-configs.sh --entity-type users
manages them (AlterUserScramCredentials, DescribeUserScramCredentials). The salted password is
computed here, as Kafka's Admin client does: the password itself never goes on the wire."""
from __future__ import annotations

import getpass
import hashlib
import os
import sys

from kproto.messages.alter_user_scram_credentials_request import AlterUserScramCredentialsRequest
from kproto.messages.describe_user_scram_credentials_request import DescribeUserScramCredentialsRequest

from broker.admin import output
from broker.admin.errors import USAGE, AdminError, KafkaError, check

MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
NAMES = {code: name for name, (code, _h) in MECHANISMS.items()}


def add_parser(sub, leaf) -> None:
    p = sub.add_parser("user", help="create, delete and list SCRAM users")
    s = p.add_subparsers(dest="action", required=True)
    c = leaf(s, "create", "create a SCRAM credential (or replace it)")
    c.add_argument("name", metavar="USER")
    c.add_argument("--password", help="default: read from the terminal, or a line of stdin")
    c.add_argument("--mechanism", choices=sorted(MECHANISMS), default="SCRAM-SHA-256")
    c.add_argument("--iterations", type=int, default=4096, help="default 4096 (Kafka's minimum)")
    d = leaf(s, "delete", "delete a user's SCRAM credential")
    d.add_argument("name", metavar="USER")
    d.add_argument("--mechanism", choices=sorted(MECHANISMS), default="SCRAM-SHA-256")
    lst = leaf(s, "list", "users with SCRAM credentials")
    lst.add_argument("names", nargs="*", metavar="USER", help="default: every user")


def run(args, admin) -> int:
    return {"create": create, "delete": delete, "list": list_users}[args.action](args, admin)


def _alter(admin, req) -> None:
    for r in admin.call(req, 0).results:
        check(r.error_code, f"user {r.user}", r.error_message)


def create(args, admin) -> int:
    password = args.password
    if password is None:
        password = getpass.getpass(f"Password for {args.name}: ") if sys.stdin.isatty() \
            else sys.stdin.readline().rstrip("\n")
    if not password:
        raise AdminError("an empty password", USAGE)
    code, hash_name = MECHANISMS[args.mechanism]
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, args.iterations)
    _alter(admin, AlterUserScramCredentialsRequest(deletions=[], upsertions=[
        AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name=args.name, mechanism=code, iterations=args.iterations, salt=salt, salted_password=salted)]))
    output.emit(args, {"user": args.name, "mechanism": args.mechanism, "iterations": args.iterations},
                lambda d: print(f"Created {d['mechanism']} credential for user {d['user']}."))
    return 0


def delete(args, admin) -> int:
    _alter(admin, AlterUserScramCredentialsRequest(upsertions=[], deletions=[
        AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=args.name,
                                                                 mechanism=MECHANISMS[args.mechanism][0])]))
    output.emit(args, {"user": args.name, "mechanism": args.mechanism, "deleted": True},
                lambda d: print(f"Deleted {d['mechanism']} credential of user {d['user']}."))
    return 0


def list_users(args, admin) -> int:
    req = DescribeUserScramCredentialsRequest(
        users=[DescribeUserScramCredentialsRequest.UserName(name=n) for n in args.names] or None)
    resp = admin.call(req, 0)
    check(resp.error_code, "DescribeUserScramCredentials", resp.error_message)
    rows = []
    for r in resp.results:
        if r.error_code:
            raise KafkaError(r.error_code, f"user {r.user}", r.error_message)
        for c in r.credential_infos:
            rows.append({"user": r.user, "mechanism": NAMES.get(c.mechanism, str(c.mechanism)),
                         "iterations": c.iterations})
    rows.sort(key=lambda r: (r["user"], r["mechanism"]))
    output.emit(args, rows, lambda rows: output.table(
        rows, [("user", "USER"), ("mechanism", "MECHANISM"), ("iterations", "ITERATIONS")]))
    return 0
