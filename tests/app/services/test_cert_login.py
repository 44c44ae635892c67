"""The ``cert`` method's glob rule and how a certificate's names meet a role's allowed lists."""

from __future__ import annotations

import pytest

from app.errors import BadRequestError
from app.services.cert_login import CertBindings, CertificateIdentity, glob_matches, matched_subject

SPIFFE_PATTERN = "spiffe://example.org/ns/*/sa/billing"


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        (SPIFFE_PATTERN, "spiffe://example.org/ns/prod/sa/billing", True),
        (SPIFFE_PATTERN, "spiffe://example.org/ns/a/b/sa/billing", False),  # * does not cross /
        (SPIFFE_PATTERN, "spiffe://example.org/ns//sa/billing", False),  # * is one character or more
        (SPIFFE_PATTERN, "spiffe://example.org/ns/prod/sa/billing-admin", False),  # the whole value
        ("spiffe://example.org/*", "spiffe://example.org/ns/prod", False),
        ("*.example.org", "api.example.org", True),
        ("*.example.org", "a.b.example.org", True),
        ("*.example.org", "example.org", False),
        ("api.example.org", "apixexample.org", False),  # . is itself, not any character
        ("svc-?", "svc-a", False),  # only * is special
        ("svc-?", "svc-?", True),
        ("[ab]", "a", False),
        ("*", "anything at all", True),
    ],
)
def test_glob_rule(pattern: str, value: str, matches: bool) -> None:
    assert glob_matches(pattern, value) is matches


IDENTITY = CertificateIdentity(
    common_names=("billing worker",),
    organizational_units=("payments", "eu"),
    dns_sans=("Worker.Billing.example.org",),
    uri_sans=("spiffe://example.org/ns/prod/sa/billing",),
)


def test_every_set_list_must_be_met_and_the_subject_is_the_best_name() -> None:
    everything = CertBindings(
        allowed_common_names=("billing *",),
        allowed_dns_sans=("*.billing.example.org",),
        allowed_uri_sans=(SPIFFE_PATTERN,),
        allowed_organizational_units=("eu",),
    )
    assert matched_subject(everything, IDENTITY) == "spiffe://example.org/ns/prod/sa/billing"
    dns_only = CertBindings(allowed_dns_sans=("*.BILLING.example.org",))
    assert (
        matched_subject(CertBindings.from_stored(dns_only.to_stored()), IDENTITY)
        == "worker.billing.example.org"
    )
    assert (
        matched_subject(CertBindings(allowed_common_names=("billing worker",)), IDENTITY) == "billing worker"
    )
    for unmet in (
        CertBindings(allowed_common_names=("billing *",), allowed_organizational_units=("us",)),
        CertBindings(allowed_uri_sans=("spiffe://example.org/ns/*/sa/payroll",)),
        CertBindings(allowed_dns_sans=("*.billing.example.org",), allowed_uri_sans=("spiffe://other/*",)),
    ):
        assert matched_subject(unmet, IDENTITY) is None
    assert (
        matched_subject(CertBindings(allowed_uri_sans=("*",)), CertificateIdentity(common_names=("x",)))
        is None
    )


def test_a_role_must_name_its_caller() -> None:
    with pytest.raises(BadRequestError, match="at least one of allowed_common_names"):
        CertBindings(allowed_organizational_units=("payments",))
    with pytest.raises(BadRequestError, match="allowed_dns_sans may not hold an empty pattern"):
        CertBindings(allowed_dns_sans=("",))
