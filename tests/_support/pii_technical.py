"""A labelled corpus of technical prose for measuring the PII scrubber's false positives and recall
(issue 29): RFC-style text, changelogs, man pages, build logs, config files and code comments,
dense with numbers that look like personal data and are not (dotted versions of 3-5 parts,
section numbers, OIDs, dotted dates, Debian versions, ZIP+4 codes, part numbers, hex dumps, UUIDs,
ISBNs, port ranges, MAC addresses, ``::`` in C++), with real addresses, e-mails and phones set in
among them and labelled.

Decided: an IP address in technical text (a documentation address, a CIDR block's network, a
netmask) is an address of its kind and is scrubbed; a version or a section number is not. MAC
addresses are not one of the kinds. Every document lists the PII it truly holds as (kind, value);
anything else the scrubber touches is a false positive.

Snippets are written by hand below; ``technical_documents`` fills their slots from fixed lists
with a seeded random, so the corpus is the same on every machine. Shared by
tests/corpus/test_pii_technical.py and benchmarks/bench_pii.py.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

# Values that are personal data (or addresses), by slot: {ipv4}, {ipv6}, {email}, {phone}.
_PII_VALUES = {
    "ipv4": (
        "192.0.2.10",
        "198.51.100.7",
        "203.0.113.254",
        "10.0.0.1",
        "172.16.4.20",
        "192.168.1.20",
        "8.8.8.8",
        "93.184.216.34",
        "100.64.12.9",
        "169.254.10.3",
    ),
    "ipv6": ("2001:db8::10", "2001:db8:85a3::8a2e:370:7334", "fe80::1ff:fe23:4567:890a", "fd12:3456:789a:1::1"),
    "email": (
        "jane.doe@example.org",
        "mkerrisk@man7.org",
        "debian-devel@lists.debian.org",
        "bugs+tracker@example.com",
        "j.smith@mail.example.co.uk",
    ),
    "phone": ("+1 617 555 0142", "(617) 555-0199", "+44 20 7946 0958", "+49 30 1234567", "617-555-0123"),
}

# Look-alikes, by slot. None of them is personal data.
_TRAPS = {
    "ver3": ("1.2.13", "2.38.1", "3.11.7", "0.9.8", "10.2.1"),
    "ver4": ("1.2.2.3", "2.4.1.3", "3.1.1.6", "1.0.2.11", "5.4.0.150", "4.18.2.11", "7.1.0.12"),
    "ver5": ("1.2.3.4.5", "2.0.1.4.7", "8.2.4.44.1"),
    "section": ("8.2.4.44", "3.8.5.3", "7.1.1.1", "4.2.1.3", "2.3.4.1", "6.5.2.12"),
    "oid": ("1.3.6.1.4.1.311", "1.2.840.113549.1.1.11", "2.5.4.3", "1.3.6.1.2.1.1.3.0", "1.2.840.113556.1.4.803"),
    "date": ("2024.01.15", "2023.12.31", "2021.06.01"),
    "stamp": ("2024-01-15T10:22:33Z", "2023-11-02 08:15:00,123", "12:30:45.250", "Mon, 15 Jan 2024 10:22:33 +0000"),
    "debver": ("1:2.3.4-5ubuntu1", "2.3.4.5-1ubuntu0.1", "1:9.18.1.2-1", "2.36.1.4-2+deb12u1", "0.9.8.7~rc1-3"),
    "semver": ("1.2.3-rc.1", "2.0.0+build.5", "4.1.2.3-beta.2", "1.0.0-alpha+001"),
    "zip4": ("MA 02110-1301", "MA 02111-1307", "CA 94043-1351", "NY 10001-2062", "NJ 07302-3409"),
    "part": ("P/N 90-4411-1022", "PN 742-1013-00", "part 0402-10K-1%", "SKU 4711-0815-22"),
    "hexdump": (
        "00000010: 7f45 4c46 0201 0100 0000 0000 0000 0000",
        "0000000: 2e54 4820 5858 4420 3120 2241  .TH XXD 1",
        "00000040: 4111 1111 1111 1111 5500 0000 0000 0004",
        "0x7ffd5a3c: 0x00000000 0x00401136 0x00000001",
    ),
    "uuid": ("b9596404-1053-4872-a240-850071880049", "123e4567-e89b-12d3-a456-426614174000"),
    "isbn": ("ISBN 978-3-16-148410-0", "ISBN 9780262033848", "ISBN 0-306-40615-2"),
    "ports": ("49152-65535", "1024:65535", "8000-8080", "32768-60999"),
    "mac": ("00:1a:2b:3c:4d:5e", "00-1A-2B-3C-4D-5E", "02:42:ac:11:00:02", "00:1a:2b:ff:fe:3c:4d:5e"),
    "cpp": ("std::chrono::seconds", "a:b:c", "ns::detail::impl", "Foo::Bar::baz()", "::operator new"),
    "build": ("build 10.0.19041.1", "Build 4.18.2.11", "build #4711", "r1234567"),
    "numbers": ("4 8416 0 1499414498 67879", "quanta 2650 1514 1514 1514 1514", "priomap 1 2 2 2 1 2 0 0 1 1"),
}

# Snippets, by source. Slots: a kind in braces is labelled PII drawn from _PII_VALUES, ``{kind=value}``
# a labelled literal, a trap's name a look-alike.
_SNIPPETS: dict[str, tuple[str, ...]] = {
    "rfc": (
        "As described in Section {section}, the client MUST retry.",
        'See RFC 7231, section {section}, and the "{section} Bogus comment state" of the HTML spec.',
        'According to the specs, sections "{section} Bogus comment state" and "{section} Markup declaration open '
        'state" apply.',
        "{section} Data state\n   Consume the next input character.",
        "   {section}  Attribute value (double-quoted) state ........ 42",
        "The OID {oid} identifies the signature algorithm (see § {section}).",
        "Object identifier: {oid}\nSNMP sysUpTime is .{oid}",
        "The example uses documentation addresses {ipv4} and {ipv6} (RFC 5737, RFC 3849).",
        "A host at {ipv4} sends to [{ipv6}]:443 as in Figure 3, per clause {section}.",
        "Appendix {section} lists test vectors; the LDAP matching rule {oid} is bitwise AND.",
        "Port ranges {ports} are dynamic; see RFC 6335 section {section}.",
        "Send comments to the working group at {email} before {date}.",
    ),
    "changelog": (
        "libfoo ({debver}) unstable; urgency=medium\n\n  * New upstream release {ver4}.\n\n"
        " -- Jane Doe <{email}>  {stamp}",
        "pkg ({ver4}-1) bookworm; urgency=low\n  * Bump to {ver4}\n -- Maintainer <{email}>  {stamp}",
        "* Update zlib to {ver4} (requires zlib >= {ver4}).\n* Fix build with gcc {ver3}.",
        "Version {ver4} ({date})\n- Fixed a crash in the parser.\n- Upgraded to {ver4} of libxml2.",
        "v{ver4}: rename option; v{ver3}: initial release.",
        "## [{ver4}] - 2024-01-15\n### Fixed\n- Handle {semver} tags.",
        "Released {ver5} on {date}; {build}; tag {semver}.",
        "{debver}: security update (CVE-2024-1234), uploaded by {email}.",
        "* Packaging: depends on python3 (>= {ver4}), libc6 (>= {ver3}).",
        "Changes in {ver4}-rc1 and {ver4}~beta2 and {ver4}+dfsg:",
        "Moved the default server from {ipv4} to a name; thanks to {email}.",
        "dpkg ({ver4}) unstable; urgency=low\n  * Git {ver4}; requires inputproto {ver4}.",
        "Fixes https://oss-fuzz.com/testcase-detail/5754863779053568 (bug #5499162606043136).",
        "zlib-{ver4}.tar.gz and nginx/{ver4} are pinned; ISBN-like ids {isbn} stay.",
    ),
    "manpage": (
        '.TH FOO 1 "{date}" "foo {ver4}" "User Commands"\n.SH NAME\nfoo \\- do things',
        ".SH AUTHOR\nWritten by Jane Doe <{email}>.\n.SH COPYRIGHT\nBoston, {zip4}, USA.",
        '.\\" Free Software Foundation, 51 Franklin St, Fifth Floor, Boston, {zip4} USA.',
        '.\\" 59 Temple Place, Suite 330, Boston, MA\n.\\" 02111-1307, USA.',
        ".B ip route add {ipv4}/24 via {ipv4} dev eth0\n.PP\nlink/ether {mac} brd ff:ff:ff:ff:ff:ff",
        ".TP\n\\fB\\-\\-listen\\fR \\fIADDR\\fR\nListen on {ipv4} (default) or [{ipv6}].",
        ".nf\n{hexdump}\n.fi",
        ".nf\n{numbers}\n.fi",
        "$ sg_raw -r 1024 /dev/sg0 53 00 00 00 00 01 00 00 01 00\nResolvers: {ipv4=8.8.4.4}, {ipv4=1.0.0.1}.",
        "Report bugs to {email}; for support call {phone}.",
        "The range of ports is {ports}; the MAC is {mac}; see {uuid}.",
        "Since version {ver4} the default netmask is {ipv4=255.255.255.0}.",
        "conforms to IEEE 802.1Q-2014 Section {section}, which applies to bridges.",
    ),
    "buildlog": (
        '-- The C compiler identification is GNU {ver3}\n-- Found ZLIB: /usr/lib/libz.so (found version "{ver4}")',
        "Collecting numpy=={ver3}\n  Downloading numpy-{ver4}-cp311-cp311-linux_x86_64.whl",
        "[{stamp}] Building target foo ({build})\n[{stamp}] {hexdump}",
        "checking for zlib >= {ver4}... yes\nchecking for openssl >= {ver3}... yes",
        "Setting up libssl3:amd64 ({debver}) ...\nUnpacking libfoo ({debver}) over ({debver}) ...",
        "Step 3/7 : FROM python:{ver3}\nStep {ver4} : RUN pip install foo=={ver4}",
        "gradle {ver4} ({build}); Kotlin {ver3}; JVM {ver3}",
        "Downloaded from {ipv4}:8080 in 1.2 s; mirror {ipv4} timed out.",
        "ld: warning: {uuid} mismatch in {cpp}",
        "MSBuild version {ver4} for .NET; {build}",
        "test_parse ({section}) ... ok\ntest_dump ({section}) ... FAIL",
        "Uploading to {ipv6} as {email}",
    ),
    "config": (
        "[server]\nlisten = {ipv4}\nport = 8443\nadmin = {email}\n# version {ver4}",
        "server {{\n    listen [{ipv6}]:443;\n    server_name example.org;\n}}  # nginx/{ver4}",
        "ip_local_port_range = {ports}\nnet.ipv4.ip_forward = 1",
        "requires:\n  - zlib >= {ver4}\n  - openssl ~= {ver3}\n  - libfoo == {ver4}",
        'version: "{ver4}"\nbuild: "{build}"\nid: {uuid}',
        "hwaddress ether {mac}\naddress {ipv4}\nnetmask {ipv4=255.255.255.0}\ngateway {ipv4}",
        "DNS1={ipv4}\nDNS2={ipv4}\nHWADDR={mac}",
        "[contact]\nname = Help desk\nphone = {phone}\nemail = {email}",
        "oid = {oid}\nschema = {section}\ndate = {date}",
        "Package: libfoo\nVersion: {debver}\nMaintainer: Jane Doe <{email}>\nDepends: libc6 (>= {ver3})",
        "<dependency><version>{ver4}</version><build>{build}</build></dependency>",
        "allowed_hosts = {ipv4}/32, {ipv6}/64",
    ),
    "code": (
        "# Copyright (c) 2003 Jane Doe <{email}>\n# Licensed under the MIT license.",
        "// Requires zlib >= {ver4}; see section {section} of the spec.\nstd::vector<int> v;",
        "/* {cpp} was added in {ver4} */\nauto x = {cpp};",
        '# According to the HTML5 specs sections "{section} Bogus\n# comment state" and "{section} Markup'
        ' declaration open\n# state"',
        ">>> ipaddress.ip_address(\"{ipv4}\")\nIPv4Address('{ipv4}')",
        "# The server at {ipv4} answers on {ports}; MAC {mac}.",
        "assert parse_version('{ver4}') < parse_version('{ver5}')",
        "if sys.version_info >= (3, 11):  # {ver4} and later\n    pass",
        "x = 0x7f; dump = '{hexdump}'",
        "# Contact: {email}\n# Based on code by J. Smith, {phone}.",
        "ISBN = '{isbn}'  # book id; uuid = '{uuid}'",
        "# Written {date}; revision {ver4}; build {build}.",
    ),
}
_SLOT = re.compile(r"\{(\w+)(?:=([^{}]*))?\}")
KINDS_LABELLED = tuple(_PII_VALUES)


@dataclass(frozen=True)
class TechnicalDocument:
    """One snippet filled in: its source, text, and the PII it truly holds as (kind, value)."""

    source: str
    text: str
    pii: tuple[tuple[str, str], ...]


def _fill(template: str, rng: random.Random) -> tuple[str, list[tuple[str, str]]]:
    """``template`` with its slots filled, and the labelled (kind, value) pairs put in."""
    found: list[tuple[str, str]] = []

    def value(match: re.Match[str]) -> str:
        slot, literal = match.groups()
        if slot in _PII_VALUES:
            chosen = literal if literal is not None else rng.choice(_PII_VALUES[slot])
            found.append((slot, chosen))
            return chosen
        return rng.choice(_TRAPS[slot])

    text = _SLOT.sub(value, template.replace("{{", "\x00").replace("}}", "\x01"))
    return text.replace("\x00", "{").replace("\x01", "}"), found


def technical_documents(per_snippet: int = 5, seed: int = 0) -> list[TechnicalDocument]:
    """``per_snippet`` documents from each snippet (slots filled at random, the same on every machine)."""
    rng = random.Random(f"pii-technical/{seed}")
    documents = []
    for source, snippets in _SNIPPETS.items():
        for template in snippets:
            for _ in range(per_snippet):
                text, found = _fill(template, rng)
                documents.append(TechnicalDocument(source, text, tuple(found)))
    return documents


def false_positive(scrub: Callable[[str], tuple[str, dict[str, int]]], document: TechnicalDocument) -> bool:
    """Whether ``scrub`` touches anything in ``document`` besides its labelled values (they are
    replaced by a tag without digits first, so that only what remains is judged)."""
    masked = document.text
    for _, value in sorted(document.pii, key=lambda pair: -len(pair[1])):
        masked = masked.replace(value, "<PII>")
    return bool(scrub(masked)[1])


def found_values(scrub: Callable[[str], tuple[str, dict[str, int]]], document: TechnicalDocument) -> list[bool]:
    """For each labelled (kind, value) of ``document``: whether ``scrub`` replaces the value whole
    as its kind (the other labelled values are replaced by a tag first)."""
    out = []
    for kind, value in document.pii:
        text = document.text
        for _, other in document.pii:
            if other != value:
                text = text.replace(other, "<PII>")
        scrubbed, found = scrub(text)
        out.append(value not in scrubbed and found.get(kind, 0) >= text.count(value))
    return out
