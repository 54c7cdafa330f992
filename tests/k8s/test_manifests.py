"""KubeRay manifests: generated from ClusterConfig, in sync with it, valid against the KubeRay CRD schemas."""
import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from cluster.config import ClusterConfig
from cluster.k8s import main as generate

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT.parent / "shared" / "k8s"
OVERLAYS = {"cpu-demo": None, "gpu": ["--gpu", "--workers", "2", "--gpus-per-worker", "2"]}


def _merge(base, patch):
    """JSON merge patch (RFC 7386): what kustomize applies to a custom resource."""
    if not isinstance(patch, dict):
        return patch
    out = dict(base) if isinstance(base, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def _rayservice(overlay: str) -> dict:
    base = yaml.safe_load((ROOT / "k8s/base/rayservice.yaml").read_text())
    patch = ROOT / f"k8s/overlays/{overlay}/rayservice-patch.yaml"
    return _merge(base, yaml.safe_load(patch.read_text())) if patch.exists() else base


def _generated(config: Path, extra: list[str] | None) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        generate([str(config)] + (extra or []))
    return buf.getvalue()


def test_committed_manifests_match_their_cluster_configs():
    assert _generated(ROOT / "k8s/base/cluster.yaml", None) == (ROOT / "k8s/base/rayservice.yaml").read_text()
    assert _generated(ROOT / "k8s/overlays/gpu/cluster.yaml", OVERLAYS["gpu"]) == \
        (ROOT / "k8s/overlays/gpu/rayservice-patch.yaml").read_text()


@pytest.mark.parametrize("overlay", list(OVERLAYS))
def test_serve_config_is_a_valid_cluster_config_and_auth_is_on(overlay):
    rs = _rayservice(overlay)
    serve = yaml.safe_load(rs["spec"]["serveConfigV2"])
    app = serve["applications"][0]
    assert app["import_path"] == "cluster.app:build_app"
    cfg = ClusterConfig.model_validate(app["args"])
    assert rs["spec"]["rayClusterConfig"]["authOptions"]["mode"] == "token"
    worker = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    gpus = worker["resources"]["limits"].get("nvidia.com/gpu", 0)
    assert (gpus >= 1) == (overlay == "gpu") and (cfg.placement.gpus_per_shard > 0) == (overlay == "gpu")
    assert any(e["name"] == "SPECFLEET_API_KEY" and "secretKeyRef" in e["valueFrom"] for e in worker["env"])


def test_serve_config_yaml_args_are_a_cluster_config():
    doc = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    assert doc["applications"][0]["import_path"] == "cluster.app:build_app"
    ClusterConfig.model_validate(doc["applications"][0]["args"])
    assert doc["http_options"]["host"] == "127.0.0.1"


@pytest.mark.skipif(not (CRDS / "ray.io_rayservices.yaml").exists(), reason="KubeRay CRD schemas not present")
@pytest.mark.parametrize("overlay", list(OVERLAYS))
def test_rayservice_validates_against_the_kuberay_crd(overlay):
    jsonschema = pytest.importorskip("jsonschema")
    crd = yaml.safe_load((CRDS / "ray.io_rayservices.yaml").read_text())
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    rs = _rayservice(overlay)
    jsonschema.validate(rs, schema)
    broken = _merge(rs, {"spec": {"rayClusterConfig": {"authOptions": {"mode": "sometimes"}}}})
    with pytest.raises(jsonschema.ValidationError):  # the schema is really checked
        jsonschema.validate(broken, schema)


def test_kustomizations_reference_existing_files():
    for k in (ROOT / "k8s").rglob("kustomization.yaml"):
        doc = yaml.safe_load(k.read_text())
        for ref in doc.get("resources", []) + [p["path"] for p in doc.get("patches", [])]:
            assert (k.parent / ref).exists(), f"{k}: {ref}"
