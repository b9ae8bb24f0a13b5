"""van Dijk et al.'s sample-size and step-size schedules against their formulas (digest §5-6)."""
import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.algorithms import async_schedules as AS


def test_sample_size_sequences():
    assert AS.constant(16, 3).tolist() == [16, 16, 16]
    assert AS.power(50, 1.0, 0, 4).tolist() == [50, 100, 150, 200]               # a i^c + b from i = 1
    assert AS.power(50, 0.5, 0, 2).tolist() == [50, math.ceil(50 * math.sqrt(2))]
    assert AS.i_over_log(50, 0, 2).tolist() == [math.ceil(100 / math.log(2)), math.ceil(150 / math.log(3))]
    with pytest.raises(ValueError, match="power"):
        AS.power(50, 1.0, 0, 3, start=0)                                           # s_0 = 0
    with pytest.raises(ValueError, match="start"):
        AS.i_over_log(50, 0, 3, start=1)


def test_theorem_22_is_lemma_b3_and_its_s0():
    """s_i = ceil((m+i+1) / (16 (d+1)^2) / ln((m+i+1) / (2(d+1)))); the paper's "s_0 = 50 for m = 2(d+1) 1450"
    gives 25 at d = 0 and 13 at d = 1 by the formula (digest §5.2 / §11.13: the example is off by 2)."""
    for d in (0, 1):
        m = 2 * (d + 1) * 1450
        s = AS.theorem_22(m, d, 5)
        i = np.arange(5)
        expected = np.ceil((m + i + 1) / (16 * (d + 1) ** 2) / np.log((m + i + 1) / (2 * (d + 1))))
        assert s.tolist() == expected.astype(int).tolist()
        assert s[0] == {0: 25, 1: 13}[d]
    assert np.all(np.diff(AS.theorem_22(100, 0, 200)) >= 0)                        # increasing


def test_dp_schedule_is_example_3s():
    s = AS.dp(10_000, 1.3216327772100012e-4, 12.106237281566509, 1.0, 5)
    assert s.tolist() == [16 + math.ceil(1.3216327772100012 * i - 1e-9) for i in range(5)]


def test_per_client_split_and_multinomial():
    assert AS.per_client([10, 20], 4).tolist() == [[3, 3, 3, 3], [5, 5, 5, 5]]      # ceil(s_i / n)
    assert AS.per_client([10], 2, weights=[0.7, 0.3]).tolist() == [[7, 3]]
    coin = AS.per_client([100, 200], 3, mode="multinomial", seed=1)
    assert coin.sum(axis=1).tolist() == [100, 200]
    assert np.array_equal(coin, AS.per_client([100, 200], 3, mode="multinomial", seed=1))
    with pytest.raises(ValueError, match="weights"):
        AS.per_client([10], 2, weights=[0.5, 0.6])


def test_step_sizes_on_host_and_traced():
    inverse = AS.step_size("inverse", 0.1, 0.001)
    root = AS.step_size("inverse_sqrt", 0.1, 0.01, per="iterations")
    assert inverse(1000.0) == pytest.approx(0.05) and root(10_000.0) == pytest.approx(0.05)
    assert float(inverse(jnp.float32(1000.0))) == pytest.approx(0.05)
    assert AS.step_size("constant", 0.0025)(123.0) == pytest.approx(0.0025)
    with pytest.raises(ValueError, match="per"):
        AS.step_size("inverse", 0.1, 0.001, per="epochs")


def test_theorem_22_delay_and_condition_2():
    """Lemma B.3's sequence satisfies condition (2) for its d under Theorem 2.2's tau; a sequence growing
    much faster does not."""
    mu, big_l, m, d = 1.0, 0.01, 400, 1
    tau = AS.theorem_22_delay(mu, big_l, m, d)
    sizes = AS.theorem_22(m, d, 300)
    assert AS.satisfies_condition_2(sizes, tau, d)
    assert not AS.satisfies_condition_2(AS.power(50, 1, 0, 300), tau, d)
    steps = AS.theorem_22_round_steps(sizes, mu, big_l, m, d)
    assert np.all(np.diff(steps) < 0) and steps[0] == pytest.approx(
        12.0 / (2 * max(d + 1, 2 * big_l * 36 / mu, 0.5 * math.ceil((m + 1) / 64 / math.log((m + 1) / 4)))
                + math.sqrt((m + 1) ** 2 / 4 / math.log((m + 1) ** 2 / 4))))
