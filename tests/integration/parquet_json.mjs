// The JSON form of a Parquet value shared by the outside readers' dump scripts (parquet_duckdb.mjs,
// parquet_hyparquet.mjs): the shape of `parquet-tool dump` — int64 outside ±2^53 exact, NaN and ±inf as
// strings — so the tests compare every reader's output with one compare().

// A value as JSON: BigInts within ±2^53 as numbers, others as {big: digits} (fmt prints them bare).
export function jsval(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === 'bigint') {
    if (v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(v);
    return { big: v.toString() };
  }
  if (typeof v === 'number') {
    if (Number.isNaN(v)) return 'NaN';
    if (v === Infinity) return 'Infinity';
    if (v === -Infinity) return '-Infinity';
    return v;
  }
  return v;
}

// One line of JSON with the {big} values as bare integers.
export function fmt(x) {
  return JSON.stringify(x, (k, v) => (v && typeof v === 'object' && 'big' in v ? '@@' + v.big + '@@' : v))
    .replace(/"@@(-?\d+)@@"/g, '$1');
}
