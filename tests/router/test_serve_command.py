import router.server
from router.cli import main


def test_specfleet_serve_without_k_serves_ngram_adaptive_at_15(monkeypatch):
    served = []
    monkeypatch.setattr(router.server, "serve_local", lambda engine, *args: served.append(engine))
    assert main(["serve", "--local"]) == 0
    assert (served[0].spec.method, served[0].spec.verify, served[0].spec.k) == ("ngram", "adaptive", 15)
    assert main(["serve", "--local", "--spec", "draft"]) == 0
    assert served[1].spec.k == 7
    assert main(["serve", "--local", "--k", "4"]) == 0
    assert served[2].spec.k == 4
