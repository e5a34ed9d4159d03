#!/usr/bin/python3
"""The benchmark's ten features in pandas 1.5 (Debian python3-pandas).
   pandas_features.py CLICKS.csv   prints {"read_s": R, "features_s": S, "rows": N}
Debian's pandas has no Parquet engine (no pyarrow/fastparquet), so it reads
the same click log as CSV; the feature time excludes the read. Windows use
groupby/rolling, strictly before each row (shift by one)."""
import json, sys, time
import pandas as pd

t0 = time.perf_counter()
df = pd.read_csv(sys.argv[1], parse_dates=["ts"])
t1 = time.perf_counter()

out = pd.DataFrame(index=df.index)
p = df["item_price"]
out["price_z"] = ((p.fillna(0) - p.mean()) / p.std(ddof=0)).astype("float32")
ts_us = df["ts"].astype("int64") // 1000
out["ts_z"] = ((ts_us - ts_us.mean()) / ts_us.std(ddof=0)).astype("float32")
u = df["user_id"]
out["user_z"] = ((u - u.mean()) / u.std(ddof=0)).astype("float32")
cats = ["books", "toys", "home", "sports", "beauty", "garden"]
oh = pd.get_dummies(pd.Categorical(df["category"], categories=cats), prefix="category", prefix_sep="=").astype("float32")
out = pd.concat([out, oh], axis=1)
out["category=<unknown>"] = (~df["category"].isin(cats)).astype("float32")
out["user_bucket"] = (pd.util.hash_pandas_object(u.astype(str), index=False) % 1024).astype("int32")
out["hour"] = df["ts"].dt.hour.astype("float32")
out["weekday"] = df["ts"].dt.weekday.astype("float32")
out["age_h"] = ((ts_us - pd.Timestamp("2023-11-01").value // 1000) / 3600e6).astype("float32")
# per-user windows, strictly before the row (the click log has no ties)
s = pd.DataFrame({"user_id": u, "ts": ts_us}).sort_values(["user_id", "ts"], kind="stable")
g = s.groupby("user_id", sort=False)
out["user_prev_count"] = g.cumcount().reindex(df.index).astype("float32")
s["gap"] = g["ts"].diff()
s["prev_gap"] = s.groupby("user_id", sort=False)["gap"].shift(1)
gap3 = s.groupby("user_id", sort=False)["prev_gap"].rolling(2, min_periods=1).mean().reset_index(level=0, drop=True)
out["user_gap3"] = (gap3.reindex(df.index) / 1e6).fillna(-1).astype("float32")
out["clicked"] = df["clicked"]
t2 = time.perf_counter()
print(json.dumps({"read_s": t1 - t0, "features_s": t2 - t1, "rows": len(out), "columns": out.shape[1]}))
