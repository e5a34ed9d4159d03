"""keel monitor rules (docs/monitoring.md, "Alert rules"): the generated
Prometheus rules are clean under `promtool check rules`, and `promtool test
rules` unit tests written here for every alert — with the thresholds this
test expects, not read back from the rules — show each one firing past its
threshold and staying silent on the safe side of it, below min_samples /
min_labels, before its `for:` and, for the SLO burn-rate alerts, at the
severity the SRE workbook's scheme gives (14.4x/6x page, 3x/1x ticket; client
errors spend no budget). Once with a config.yaml that sets every threshold
(and --slo overriding it), once with the defaults. Also: errors of the
command (unknown model, bad --slo, a config.yaml error with its position),
`monitor: false` (SLO rules only) and --out."""
import math
import os
import shutil
import sys
from statistics import NormalDist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve"))
from helpers import check, done, tmpdir  # noqa: E402
from promrules import keel_rules, promtool, rule_names, series_name, write_test  # noqa: E402

if not shutil.which("promtool"):
    check("monitor_rules_promtool_installed", False, "promtool missing (Debian package prometheus, mk/packages.txt)")
    done()

d = tmpdir("rules-")
repo = os.path.join(d, "repo")
CUSTOM = {"psi": 0.25, "js": 0.15, "p_value": 0.01, "min_samples": 200, "null_delta": 0.1, "unknown_ratio": 0.02,
          "oob_ratio": 0.03, "accuracy_drop": 0.05, "auc_drop": 0.02, "rmse_rise": 0.2, "min_labels": 300, "quality_p_value": 0.005,
          "for_min": 5, "slo": 99.5, "slo_latency": "0.1", "slo_latency_target": 95}
DEFAULT = {"psi": 0.2, "js": 0.1, "p_value": 0.001, "min_samples": 100, "null_delta": 0.05, "unknown_ratio": 0.05,
           "oob_ratio": 0.05, "accuracy_drop": 0.02, "auc_drop": 0.03, "rmse_rise": 0.1, "min_labels": 200, "quality_p_value": 0.01,
           "for_min": 10, "slo": 99.9, "slo_latency": "0.25", "slo_latency_target": 99}
configs = {
    "ctr": "monitor:\n  psi: 0.25\n  js: 0.15\n  p_value: 0.01\n  min_samples: 200\n  null_delta: 0.1\n"
           "  unknown_ratio: 0.02\n  oob_ratio: 0.03\n  feedback_capacity: 1000\n  accuracy_drop: 0.05\n"
           "  auc_drop: 0.02\n  rmse_rise: 0.2\n  min_labels: 300\n  quality_p_value: 0.005\n  alert_for: 5m\n  slo_availability: 98\n"
           "  slo_latency: 0.1\n  slo_latency_target: 95\n",
    "dflt": "monitor: {feedback_capacity: 1000}\n",
    "nomon": "monitor: false\n",
    "badcfg": "monitor:\n  slo_latency: 0.3\n",
    "nofb": None,
}
for m, text in configs.items():
    os.makedirs(os.path.join(repo, m))
    if text:
        with open(os.path.join(repo, m, "config.yaml"), "w") as f:
            f.write(text)

# ------------------------------------------------------------------ the cases


def alert(name, state="firing", **labels):
    out = {"alertname": name, "alertstate": state}
    out.update(labels)
    return out


def drift_cases(model, t):
    """every drift / data-quality alert: a fires, b on the safe side, c one sample short"""
    N, f = t["min_samples"], t["for_min"]
    feats = [("KeelFeatureDriftPSI", "psi", t["psi"], t["psi"] * 0.95),   # >= threshold fires
             ("KeelFeatureDriftJS", "js", t["js"], t["js"] * 0.95),
             ("KeelFeatureDriftKS", "ks_p_value", t["p_value"] * 0.5, t["p_value"]),   # < p fires
             ("KeelFeatureDriftChi2", "chi2_p_value", t["p_value"] * 0.5, t["p_value"]),
             ("KeelFeatureUnknownCategories", "unknown_ratio", t["unknown_ratio"] + 0.01, t["unknown_ratio"]),
             ("KeelFeatureOutOfRange", "oob_ratio", t["oob_ratio"] + 0.01, t["oob_ratio"])]
    cases = []
    for name, stat, bad, good in feats:
        series, want = [], []
        for feat, x, n in (("a", bad, N), ("b", good, N), ("c", bad, N - 1)):
            lb = {"model": model, "version": "1", "feature": feat, "source": "input", "window": "5m"}
            series.append((series_name("keel_feature_drift", dict(lb, stat=stat)), "%r+0x40" % x))
            series.append((series_name("keel_feature_window_samples", lb), "%d+0x40" % n))
            if feat == "a":
                want.append(alert(name, severity="ticket", keel_model=model, stat=stat, **lb))
        cases.append({"name": "%s %s" % (model, name), "series": series, "eval": "%dm" % (f + 2),
                      "expect": [(series_name("ALERTS", {"alertname": name, "alertstate": "firing"}), want)]})
        cases.append({"name": "%s %s not before for" % (model, name), "series": series, "eval": "%dm" % (f - 1),
                      "expect": [(series_name("ALERTS", {"alertname": name, "alertstate": "firing"}), [])]})
    # nulls: the live share above the reference (window="reference") by more than null_delta
    series, want = [], []
    for feat, delta, n in (("a", t["null_delta"] + 0.01, N), ("b", t["null_delta"] - 0.01, N), ("c", 0.5, N - 1)):
        lb = {"model": model, "version": "1", "feature": feat, "source": "input"}
        series.append((series_name("keel_feature_null_ratio", dict(lb, window="reference")), "0.01+0x40"))
        series.append((series_name("keel_feature_null_ratio", dict(lb, window="1h")), "%r+0x40" % (0.01 + delta)))
        series.append((series_name("keel_feature_window_samples", dict(lb, window="1h")), "%d+0x40" % n))
        if feat == "a":
            want.append(alert("KeelFeatureNullRatio", severity="ticket", keel_model=model, window="1h", **lb))
    cases.append({"name": model + " KeelFeatureNullRatio", "series": series, "eval": "%dm" % (f + 2),
                  "expect": [(series_name("ALERTS", {"alertname": "KeelFeatureNullRatio"}), want)]})
    # prediction drift: the output columns
    for name, stat, bad, good in feats[:3]:
        name = name.replace("Feature", "Prediction")
        series, want = [], []
        for out, x, n in (("output", bad, N), ("output[1]", good, N), ("output[2]", bad, N - 1)):
            lb = {"model": model, "version": "2", "output": out, "window": "24h"}
            series.append((series_name("keel_prediction_drift", dict(lb, stat=stat)), "%r+0x40" % x))
            series.append((series_name("keel_prediction_window_samples", lb), "%d+0x40" % n))
            if out == "output":
                want.append(alert(name, severity="ticket", keel_model=model, stat=stat, **lb))
        cases.append({"name": "%s %s" % (model, name), "series": series, "eval": "%dm" % (f + 2),
                      "expect": [(series_name("ALERTS", {"alertname": name}), want)]})
    return cases


def accuracy_case(model, t):
    """the accuracy drop must pass accuracy_drop and a two-proportion z-test at p_value against the
    reference's validation rows: version 1 both; 2 past the drop, not significant; 3 significant, under
    the drop; 4 one label short; 5 no reference count (meta.json without data.val_rows)"""
    L, f, ref = t["min_labels"], t["for_min"], 0.8
    z = NormalDist().inv_cdf(1 - t["quality_p_value"])

    def zse(n, nref):
        return z * math.sqrt(ref * (1 - ref) * (1 / n + 1 / nref))
    assert zse(L, 1200) > t["accuracy_drop"] and zse(10 ** 6, 10 ** 6) < t["accuracy_drop"] - 0.005
    vers = [("1", max(t["accuracy_drop"], zse(10 ** 5, 1200)) + 0.01, 10 ** 5, 1200),
            ("2", (t["accuracy_drop"] + zse(L, 1200)) / 2, L, 1200),
            ("3", t["accuracy_drop"] - 0.005, 10 ** 6, 10 ** 6),
            ("4", 0.3, L - 1, 1200),
            ("5", 0.3, 10 ** 5, None)]
    series, want = [], []
    for ver, drop, n, nref in vers:
        lb = {"model": model, "version": ver}
        series.append((series_name("keel_model_quality", dict(lb, metric="accuracy", window="reference")), "%r+0x40" % ref))
        series.append((series_name("keel_model_quality", dict(lb, metric="accuracy", window="1h")),
                       "%r+0x40" % (ref - drop)))
        series.append((series_name("keel_model_quality_samples", dict(lb, window="1h")), "%d+0x40" % n))
        if nref:
            series.append((series_name("keel_model_quality_samples", dict(lb, window="reference")), "%d+0x40" % nref))
    want = [alert("KeelModelAccuracyDrop", severity="ticket", keel_model=model, metric="accuracy", window="1h",
                  model=model, version="1")]
    return {"name": model + " KeelModelAccuracyDrop", "series": series, "eval": "%dm" % (f + 2),
            "expect": [(series_name("ALERTS", {"alertname": "KeelModelAccuracyDrop"}), want)]}


def quality_cases(model, t):
    """live quality against meta.json's (window="reference"): version 1 fires, 2 safe, 3 too few labels"""
    L, f = t["min_labels"], t["for_min"]
    cases = [accuracy_case(model, t)]
    for name, metric, ref, bad, good in (
            ("KeelModelAUCDrop", "auc", 0.75, 0.75 - t["auc_drop"] - 0.005, 0.75 - t["auc_drop"] + 0.005),
            ("KeelModelRMSERise", "rmse", 2.0, 2 * (1 + t["rmse_rise"]) + 0.01, 2 * (1 + t["rmse_rise"]) - 0.01)):
        series, want = [], []
        for ver, x, n in (("1", bad, L), ("2", good, L), ("3", bad, L - 1)):
            lb = {"model": model, "version": ver}
            series.append((series_name("keel_model_quality", dict(lb, metric=metric, window="reference")), "%r+0x40" % ref))
            series.append((series_name("keel_model_quality", dict(lb, metric=metric, window="5m")), "%r+0x40" % x))
            series.append((series_name("keel_model_quality_samples", dict(lb, window="5m")), "%d+0x40" % n))
            if ver == "1":
                want.append(alert(name, severity="ticket", keel_model=model, metric=metric, window="5m", **lb))
        cases.append({"name": "%s %s" % (model, name), "series": series, "eval": "%dm" % (f + 2),
                      "expect": [(series_name("ALERTS", {"alertname": name}), want)]})
    return cases


def slo_cases(model, t, slo):
    """burn rates r x budget: 16x pages (and tickets), 4x tickets, 0.8x nothing; client errors spend nothing"""
    cases = []
    budget = 1 - slo / 100
    for burn, sev in ((16, ["page", "ticket"]), (4, ["ticket"]), (0.8, []), (0, [])):
        err = 100000 * burn * budget
        series = [(series_name("keel_inference_requests_total", {"model": model, "version": "1", "result": "success"}),
                   "0+%rx180" % (100000 - err)),
                  (series_name("keel_inference_requests_total", {"model": model, "version": "1", "result": "internal"}),
                   "0+%rx180" % err),
                  (series_name("keel_inference_requests_total", {"model": model, "version": "1", "result": "bad_request"}),
                   "0+50000x180")]   # the client's failures: no budget spent
        want = [alert("KeelAvailabilityBudgetBurn", severity=s, keel_model=model, model=model) for s in sev]
        cases.append({"name": "%s availability burn %gx" % (model, burn), "series": series, "eval": "150m",
                      "expect": [(series_name("ALERTS", {"alertname": "KeelAvailabilityBudgetBurn"}), want)]})
    lbudget = 1 - t["slo_latency_target"] / 100
    for burn, sev in ((16, ["page", "ticket"]), (4, ["ticket"]), (0.8, [])):
        slow = 1000 * burn * lbudget
        lb = {"model": model, "version": "1", "priority": "1"}
        series = [(series_name("keel_inference_request_duration_seconds_bucket", dict(lb, le=t["slo_latency"])),
                   "0+%rx180" % (1000 - slow)),
                  (series_name("keel_inference_request_duration_seconds_bucket", dict(lb, le="+Inf")), "0+1000x180"),
                  (series_name("keel_inference_request_duration_seconds_count", lb), "0+1000x180")]
        want = [alert("KeelLatencyBudgetBurn", severity=s, keel_model=model, model=model) for s in sev]
        cases.append({"name": "%s latency burn %gx" % (model, burn), "series": series, "eval": "150m",
                      "expect": [(series_name("ALERTS", {"alertname": "KeelLatencyBudgetBurn"}), want)]})
    for ready, want in ((0, [alert("KeelModelNotReady", severity="page", keel_model=model, model=model)]), (1, [])):
        cases.append({"name": "%s ready %d" % (model, ready), "series": [
            (series_name("keel_model_ready", {"model": model}), "%d+0x20" % ready)], "eval": "6m",
            "expect": [(series_name("ALERTS", {"alertname": "KeelModelNotReady"}), want)]})
    return cases


def covered(cases):
    return {c["expect"][0][0].split('alertname="')[1].split('"')[0] for c in cases}


# ------------------------------------------------------------------ generate, check, test
for model, t, args in (("ctr", CUSTOM, ["--slo", "99.5"]), ("dflt", DEFAULT, [])):
    rc, out, err = keel_rules(repo, model, *args)
    path = os.path.join(d, model + ".rules.yml")
    with open(path, "w") as f:
        f.write(out)
    check("monitor_rules_%s_generate" % model, rc == 0 and "groups:" in out, err)
    rc, msg = promtool("check", "rules", path)
    check("monitor_rules_%s_promtool_check" % model, rc == 0 and "SUCCESS" in msg, msg[-600:])
    cases = drift_cases(model, t) + quality_cases(model, t) + slo_cases(model, t, t["slo"])
    names = rule_names(path)
    alerts = {n for n in names if not n.startswith("model:")}
    check("monitor_rules_%s_every_alert_tested" % model, alerts == covered(cases), sorted(alerts ^ covered(cases)))
    check("monitor_rules_%s_recording_rules" % model,
          all(names.get("model:keel_inference_%s:ratio_rate%s" % (k, w)) == 1
              for k in ("errors", "slow") for w in ("5m", "30m", "1h", "2h", "6h", "1d", "3d")), names)
    tpath = os.path.join(d, model + ".test.yml")
    write_test(tpath, [path], cases)
    rc, msg = promtool("test", "rules", tpath)
    check("monitor_rules_%s_promtool_unit_tests" % model, rc == 0, msg[-1500:])
    print("%s: %d alerts, %d promtool test groups" % (model, len(alerts), len(cases)))

# --slo overrides config.yaml's slo_availability (98 there)
rc, out, _ = keel_rules(repo, "ctr")
check("monitor_rules_slo_from_config", rc == 0 and "(14.4 * 0.02)" in out and "(14.4 * 0.005)" not in out,
      [ln for ln in out.splitlines() if "14.4" in ln][:2])
rc, out2, _ = keel_rules(repo, "ctr", "--slo", "99.5")
check("monitor_rules_slo_flag_overrides", rc == 0 and "(14.4 * 0.005)" in out2, out2[:200])

# feedback off: no quality rules (said in a comment); monitor: false: the SLO rules only
rc, out, _ = keel_rules(repo, "nofb")
check("monitor_rules_no_feedback_no_quality", rc == 0 and "KeelModelAccuracyDrop" not in out and
      "KeelFeatureDriftPSI" in out and "feedback_capacity is 0" in out, out[:300])
rc, out, _ = keel_rules(repo, "nomon")
path = os.path.join(d, "nomon.rules.yml")
with open(path, "w") as f:
    f.write(out)
rc2, msg = promtool("check", "rules", path)
check("monitor_rules_monitor_off_slo_only", rc == 0 and rc2 == 0 and "KeelFeatureDrift" not in out and
      "KeelAvailabilityBudgetBurn" in out, (out[:300], msg))

# --out: the same text, written atomically (no temporary left)
outp = os.path.join(d, "out", "r.yml")
os.makedirs(os.path.dirname(outp))
rc, so, se = keel_rules(repo, "dflt", "--out", outp)
check("monitor_rules_out_file", rc == 0 and so == "" and open(outp).read() == open(os.path.join(d, "dflt.rules.yml")).read()
      and os.listdir(os.path.dirname(outp)) == ["r.yml"], (rc, se, os.listdir(os.path.dirname(outp))))

# errors: exit 1 naming the model or the config.yaml position, exit 2 for usage
rc, _, err = keel_rules(repo, "nosuch")
check("monitor_rules_unknown_model", rc == 1 and "nosuch" in err and "no model" in err, (rc, err))
rc, _, err = keel_rules(repo, "dflt", "--slo", "120")
check("monitor_rules_bad_slo_usage", rc == 2 and "--slo" in err, (rc, err))
rc, _, err = keel_rules(repo, "badcfg")
check("monitor_rules_config_error_position", rc == 1 and "config.yaml:2:" in err and "latency histogram" in err,
      (rc, err))
rc, _, err = keel_rules(repo, "../repo")
check("monitor_rules_bad_model_name", rc == 1 and "model name" in err, (rc, err))
done()
