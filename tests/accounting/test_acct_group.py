"""User-level privacy: the group-privacy map and its inverse against Lemma 3.6's closed form, the grouped
Gaussian's RDP against the Gaussian's closed form, and the two user-level calibrations side by side."""
import math

import dp_accounting
import numpy as np
import pytest

from jaxfl.accounting import make_accountant
from jaxfl.accounting.group import (group_privacy, grouped_gaussian, record_level_target, user_level_noise)


@pytest.mark.parametrize("eps,delta,k", [(1.0, 1e-5, 1), (0.5, 1e-6, 2), (0.05, 1e-4, 20)])
def test_group_privacy_forms_and_their_inverses(eps, delta, k):
    """"paper": Lemma 3.6 as printed, (k eps, k e^{k eps} delta), inverted as Huang et al. §3.1.2's eps' = eps r / m,
    delta' = delta r / (m e^eps) (m / r = k); "chain": delta (e^{k eps} - 1) / (e^eps - 1), the identity at k = 1
    and below both k e^{(k-1) eps} delta (Dwork & Roth) and the paper's form."""
    ke, kd = group_privacy(eps, delta, k, bound="paper")
    assert ke == pytest.approx(k * eps) and kd == pytest.approx(k * math.exp(k * eps) * delta)
    assert record_level_target(eps, delta, k, bound="paper") == pytest.approx((eps / k, delta / (k * math.exp(eps))))
    ce, cd = group_privacy(eps, delta, k)
    assert ce == pytest.approx(k * eps)
    assert cd == pytest.approx(delta * sum(math.exp(i * eps) for i in range(k)), rel=1e-12)
    assert cd <= k * math.exp((k - 1) * eps) * delta * (1 + 1e-12) and cd <= kd
    for bound in ("chain", "paper"):
        back = group_privacy(*record_level_target(eps, delta, k, bound=bound), k, bound=bound)
        assert back == pytest.approx((eps, delta), rel=1e-12)
    if k == 1:
        assert group_privacy(eps, delta, 1) == (eps, delta) and record_level_target(eps, delta, 1) == (eps, delta)


def test_grouped_gaussian_has_the_rdp_of_sensitivity_k():
    """A Gaussian of std z C on a sum where one user moves k clipped terms: RDP alpha k^2 / (2 z^2), exactly
    (group privacy without conversion loss for the unsampled Gaussian)."""
    z, k = 3.0, 4
    orders = (2.0, 8.0, 32.0)
    acc = dp_accounting.rdp.RdpAccountant(orders=orders)
    acc.compose(grouped_gaussian(z, k))
    np.testing.assert_allclose(acc._rdp, [a * k**2 / (2 * z**2) for a in orders], rtol=1e-12)


def test_per_user_sampling_needs_less_noise_than_group_privacy():
    """Same run (Poisson rate, steps), user-level (eps, delta) both ways: group privacy calibrates to the
    stricter (eps / k, delta / (k e^eps)), so its multiplier is larger; at k = 1 the two coincide. Each
    returned multiplier meets its own target under the RDP accountant."""
    kw = dict(sampling_rate=0.02, steps=500)
    one = user_level_noise(1.0, 1e-5, records_per_user=1, **kw)
    assert one.group == pytest.approx(one.per_user, rel=1e-6) and one.record_level == (1.0, 1e-5)
    for k in (2, 5):
        out = user_level_noise(1.0, 1e-5, records_per_user=k, **kw)
        assert out.group > out.per_user and out.records_per_user == k
        event = lambda z: dp_accounting.SelfComposedDpEvent(  # noqa: E731
            dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(z)), 500)
        assert make_accountant("rdp").compose(event(out.per_user)).epsilon(1e-5) <= 1.0 + 1e-6
        eps_r, delta_r = out.record_level
        assert make_accountant("rdp").compose(event(out.group)).epsilon(delta_r) <= eps_r + 1e-6


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="group_size"):
        group_privacy(1.0, 1e-5, 0)
    with pytest.raises(ValueError, match="delta"):
        record_level_target(1.0, 1.5, 2)
    with pytest.raises(ValueError, match="bound"):
        group_privacy(1.0, 1e-5, 2, bound="dwork")
    with pytest.raises(ValueError, match="sampling_rate"):
        user_level_noise(1.0, 1e-5, records_per_user=2, sampling_rate=2.0, steps=3)
