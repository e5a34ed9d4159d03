"""DuckDB 1.5 for the interop tests: npm @duckdb/node-api installed once into
build/npm (a missing or failing install is the caller's FAIL, never a skip)."""
import os
import subprocess


def ensure_duckdb(npm_dir):
    """Returns (ok, why)."""
    mod = os.path.join(npm_dir, "node_modules", "@duckdb", "node-api")
    if os.path.isdir(mod):
        return True, ""
    os.makedirs(npm_dir, exist_ok=True)
    try:
        r = subprocess.run(["npm", "install", "--prefix", npm_dir, "@duckdb/node-api"], capture_output=True, text=True,
                           timeout=600)
    except Exception as e:  # npm missing or hung
        return False, f"npm install @duckdb/node-api failed: {e}"
    if r.returncode != 0 or not os.path.isdir(mod):
        return False, "npm install @duckdb/node-api failed: " + (r.stderr or r.stdout)[-500:]
    return True, ""
