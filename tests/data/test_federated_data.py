"""FederatedData construction: padding, masks and the bad-input errors."""
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.data.federated import from_silos


def test_padding_rows_are_zero_and_masked():
    fd = from_silos([(np.ones((3, 2)), np.ones(3, np.int32)), (np.full((1, 2), 2.0), np.zeros(1, np.int32))])
    assert fd.x.shape == (2, 3, 2) and fd.counts.tolist() == [3, 1]
    np.testing.assert_array_equal(fd.mask(), [[True, True, True], [True, False, False]])
    np.testing.assert_array_equal(fd.x[1, 1:], 0.0)
    padded = fd.pad_silos(4)
    assert padded.num_silos == 4 and padded.counts.tolist() == [3, 1, 0, 0]


@pytest.mark.parametrize("silos, match", [
    ([(np.ones((2, 3)), np.ones(2)), (np.ones((0, 3)), np.ones(0))], "silo 1 has zero records"),
    ([(np.array([[1.0, np.nan]]), np.ones(1))], "silo 0: features contain NaN"),
    ([(np.ones((2, 3)), np.array([1.0, np.inf]))], "silo 0: targets contain NaN or inf"),
    ([(np.ones((2, 3)), np.ones(2)), (np.ones((2, 4)), np.ones(2))], "silo 1: feature/target shape"),
    ([(np.ones((2, 3)), np.ones(3))], "silo 0: x has 2 records but y has 3"),
    ([], "at least one silo"),
])
def test_bad_input_names_the_silo_and_value(silos, match):
    with pytest.raises(ValueError, match=match):
        from_silos(silos)


def test_empty_silo_allowed_only_when_asked():
    fd = from_silos([(np.ones((2, 3)), np.ones(2)), (np.ones((0, 3)), np.ones(0))], allow_empty=True)
    assert fd.counts.tolist() == [2, 0] and not bool(jnp.any(fd.mask()[1]))
