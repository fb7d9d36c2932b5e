"""The exporter's examples: the DaemonSet gives it what the ledger and the process table need, and the dashboard
and the alert rules query only metrics the exporter serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from test_exporter import NAMES

from devmem.exporter.server import DEFAULT_LISTEN, parse_listen

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "exporter"
SERVED = {*NAMES, *(f"{name}_total" for name, kind in NAMES.items() if kind == "counter")}


def pod() -> dict:
    return yaml.safe_load((EXAMPLES / "daemonset.yaml").read_text())["spec"]["template"]["spec"]


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bdevmem_[a-z_]+", expr))


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((EXAMPLES / "grafana-dashboard.json").read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def rule_exprs() -> list[str]:
    return [
        r["expr"] for g in yaml.safe_load((EXAMPLES / "prometheus-rules.yml").read_text())["groups"] for r in g["rules"]
    ]


def test_the_daemonset_runs_in_the_hosts_pid_namespace():
    assert pod()["hostPID"] is True


def test_the_daemonset_reads_the_ledger_from_the_hosts_dev_shm_read_only():
    spec = pod()
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mount = next(m for m in container["volumeMounts"] if env["DEVMEM_LEDGER_DIR"].startswith(m["mountPath"] + "/"))
    assert volumes[mount["name"]]["hostPath"]["path"] == "/dev/shm" and mount["readOnly"] is True
    assert env["DEVMEM_LEDGER_DIR"] == mount["mountPath"] + "/devmem"  # the ledger's default, /dev/shm/devmem


def test_the_daemonset_listens_on_the_pods_own_address_only():
    (container,) = pod()["containers"]
    args = container["args"]
    host, port = parse_listen(args[args.index("--listen") + 1])
    assert host == "$(POD_IP)"  # Kubernetes puts the pod's address in its place
    (pod_ip,) = [e for e in container["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert [p["containerPort"] for p in container["ports"]] == [port] == [int(DEFAULT_LISTEN.rsplit(":", 1)[1])]


def test_the_image_serves_on_the_port_the_daemonset_declares():
    (container,) = pod()["containers"]
    image_listen = re.search(r'"--listen", "([^"]+)"', (EXAMPLES / "Dockerfile").read_text())
    assert image_listen is not None
    assert [p["containerPort"] for p in container["ports"]] == [parse_listen(image_listen.group(1))[1]]


def test_the_dashboard_queries_only_served_metrics():
    names = set().union(*map(metric_names, dashboard_exprs()))
    assert names and names <= SERVED, names - SERVED


def test_the_alert_rules_query_only_served_metrics():
    names = set().union(*map(metric_names, rule_exprs()))
    assert names and names <= SERVED, names - SERVED
