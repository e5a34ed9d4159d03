"""The outside Parquet readers of the interop tests, installed once into build/npm with npm: DuckDB 1.5
(@duckdb/node-api) and hyparquet (pure JavaScript, a second implementation; pinned versions).
A missing or failing install is the caller's FAIL, never a skip."""
import os
import subprocess


def ensure_npm(npm_dir, packages, module_dirs):
    """Installs packages (npm specs) into npm_dir unless every module dir exists. Returns (ok, why)."""
    mods = [os.path.join(npm_dir, "node_modules", m) for m in module_dirs]
    if all(os.path.isdir(m) for m in mods):
        return True, ""
    os.makedirs(npm_dir, exist_ok=True)
    what = " ".join(packages)
    try:
        r = subprocess.run(["npm", "install", "--prefix", npm_dir, *packages], capture_output=True, text=True,
                           timeout=600)
    except Exception as e:  # npm missing or hung
        return False, f"npm install {what} failed: {e}"
    if r.returncode != 0 or not all(os.path.isdir(m) for m in mods):
        return False, f"npm install {what} failed: " + (r.stderr or r.stdout)[-500:]
    return True, ""


def ensure_duckdb(npm_dir):
    """Returns (ok, why)."""
    return ensure_npm(npm_dir, ["@duckdb/node-api"], ["@duckdb/node-api"])


def ensure_hyparquet(npm_dir):
    """Returns (ok, why)."""
    return ensure_npm(npm_dir, ["hyparquet@1.33.0", "hyparquet-compressors@1.1.2"], ["hyparquet", "hyparquet-compressors"])
