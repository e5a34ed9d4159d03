"""Helpers of the alert-rule tests (tests/integration/monitor_rules.py,
monitor_alerts.py): `keel monitor rules`, the rule names of a rules file,
promtool unit-test files (`promtool test rules`) written from Python dicts,
and a /metrics scrape turned into promtool input series (each sample held
constant), so the generated rules are evaluated by Prometheus' own rule
engine against what the real server exposes."""
import json
import os
import subprocess

import yaml

from helpers import KEEL


def keel_rules(repo, model, *args):
    """keel monitor rules MODEL --repo REPO ARGS: (exit code, stdout, stderr)"""
    r = subprocess.run([KEEL, "monitor", "rules", model, "--repo", repo] + list(args), capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


def rule_names(path):
    """{alert or record name: count} of a rules file"""
    doc = yaml.safe_load(open(path))
    out = {}
    for g in doc["groups"]:
        for r in g["rules"]:
            k = r.get("alert") or r.get("record")
            out[k] = out.get(k, 0) + 1
    return out


def promtool(*args, stdin=None):
    r = subprocess.run(["promtool"] + list(args), input=stdin, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def series_name(name, labels):
    return "%s{%s}" % (name, ",".join('%s=%s' % (k, json.dumps(str(v))) for k, v in sorted(labels.items())))


def alerts_query(alertname, state="firing", **labels):
    sel = {"alertname": alertname, "alertstate": state}
    sel.update(labels)
    return series_name("ALERTS", sel)


def write_test(path, rule_files, cases):
    """cases: [{"name", "series": [(series, values)], "eval": "30m", "expect": [(query, [labels dict, ...])]}]
    — each case one promtool test group (its own series); each expectation a
    promql_expr_test whose result must be exactly those series with value 1 (a
    labels dict: an ALERTS series; a string: the labels as written, '{}' for an aggregate)."""
    tests = []
    for c in cases:
        exprs = []
        for q, want in c["expect"]:
            exprs.append({"expr": q, "eval_time": c.get("eval", "30m"),
                          "exp_samples": [{"labels": w if isinstance(w, str) else series_name("ALERTS", w), "value": 1}
                                          for w in want]})
        tests.append({"name": c["name"], "interval": "1m",
                      "input_series": [{"series": s, "values": v} for s, v in c["series"]],
                      "promql_expr_test": exprs})
    with open(path, "w") as f:
        yaml.safe_dump({"rule_files": [os.path.abspath(p) for p in rule_files], "evaluation_interval": "1m",
                        "tests": tests}, f, sort_keys=False, width=1000)


def parse_scrape(text):
    """[(series name with labels, value)] of a Prometheus text exposition (finite samples)"""
    out = []
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        series, _, value = ln.rpartition(" ")
        try:
            x = float(value)
        except ValueError:
            continue
        if x == x and abs(x) != float("inf"):
            out.append((series, x))
    return out


def held(samples, minutes=40):
    """promtool input series: every scraped sample constant for `minutes`"""
    return [(s, "%.17g+0x%d" % (x, minutes)) for s, x in samples]
