import pytest

from workers.config import SpecConfig


@pytest.mark.parametrize("method, verify, k", [("ngram", "adaptive", 15), ("ngram", "adaptive-global", 15),
                                               ("draft", "adaptive", 7), ("ngram", "fixed", 4),
                                               ("draft", "fixed", 4), ("off", "fixed", 4)])
def test_k_not_given_is_the_measured_depth_of_its_method_and_verification(method, verify, k):
    assert SpecConfig(method=method, verify=verify).k == k
    assert SpecConfig(method=method, verify=verify, k=None).k == k  # the CLI passes --k's None
    assert SpecConfig.model_validate({"method": method, "verify": verify}).k == k  # a YAML's spec


def test_a_given_k_is_kept():
    assert SpecConfig(method="ngram", verify="adaptive", k=4).k == 4
    assert SpecConfig(method="draft", verify="fixed", k=9).k == 9
    with pytest.raises(ValueError):
        SpecConfig(method="ngram", verify="adaptive", k=0)
