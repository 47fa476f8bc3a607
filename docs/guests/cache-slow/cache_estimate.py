"""The bench's cache estimate (`cache_mib`) under the old rule and the new one, recomputed from
every probe on record in docs/ (`random_read_ns_by_mib`, since f02382c).

old: every step below the geometric midpoint between the fastest step and the 64 MiB read
(until b1f58d1); new: every step under a third of the 64 MiB read (b1f58d1).
Run from the repository's root: python3 docs/guests/cache-slow/cache_estimate.py [more.json ...]
"""
import glob, json, math, sys

def est(steps, bound):
    r = 0
    for mib, ns in steps:
        if ns < bound:
            r = mib
        else:
            break
    return r

files = sorted(set(glob.glob('docs/**/*.json', recursive=True))) + sys.argv[1:]
rows = []
for f in files:
    try:
        d = json.load(open(f))
    except Exception:
        continue
    if not isinstance(d, dict):
        continue
    p = (d.get('machine') or {}).get('memory_probe') if isinstance(d.get('machine'), dict) else None
    if not p:
        continue
    for w in ['start', 'end']:
        q = p.get(w)
        if not q or 'random_read_ns_by_mib' not in q:
            continue
        st, mem = q['random_read_ns_by_mib'], q['random_read_ns_64mib']
        old = est(st, math.sqrt(min(n for _, n in st) * mem))
        new = est(st, mem / 3)
        tsc = d['machine'].get('tsc_hz', 0) / 1e9
        rows.append((f, w, q.get('cache_mib'), old, new, mem, tsc))
print(f"{len(rows)} probes; recorded differs from the old rule in {sum(r[2] != r[3] for r in rows)}")
for host in sorted({round(r[6], 3) for r in rows}):
    rs = [r for r in rows if round(r[6], 3) == host]
    ch = [r for r in rs if r[3] != r[4]]
    print(f"TSC {host:.3f} GHz: {len(rs)} probes, {len(ch)} estimates change")
    for r in ch:
        print(f"  {r[0]} {r[1]}: {r[3]} -> {r[4]} MiB (64 MiB read {r[5]} ns)")
