import json, statistics as S, sys
for f in sys.argv[1:]:
    rs=[json.loads(l) for l in open(f)]
    print(f, len(rs))
    med=lambda sc,tag,k="g0_mbps": S.median([r[k] for r in rs if r["scenario"]==sc and r["tag"]==tag])
    for sc in ("alone","flooded","stopped","descheduled"):
        row=[]
        for tag in ("old","new"):
            v=[r["g0_mbps"] for r in rs if r["scenario"]==sc and r["tag"]==tag]
            row.append("%s %5.0f [%s] g1 %6d det %s" % (tag, S.median(v), " ".join("%.0f"%x for x in v), med(sc,tag,"g1_rx_packets"), med(sc,tag,"leases_detached") if "leases_detached" in rs[0] else "-"))
        print("  %-12s %s" % (sc, " | ".join(row)))
    for tag in ("old","new"):
        al=med("alone",tag); fl=med("flooded",tag)
        print("  %s: vs alone: flooded %.2f stopped %.2f desched %.2f | vs flooded: stopped %.2f desched %.2f" % (tag, fl/al, med("stopped",tag)/al, med("descheduled",tag)/al, med("stopped",tag)/fl, med("descheduled",tag)/fl))
    for sc in ("alone","flooded","stopped","descheduled"):
        print("  new/old %-12s %.2f" % (sc, med(sc,"new")/med(sc,"old")))
