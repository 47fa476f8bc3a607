# usage: inflight.py NAME...  -- the senders' bytes in flight (summed over the streams) and smoothed
# RTTs at the end of each phase of a prof.sh run
import json,sys,glob
for n in sys.argv[1:]:
    for ph in ['one','all']:
        fl=[json.load(open(f)) for f in sorted(glob.glob(f'{n}.{ph}.s[0-9].json'))]
        mbps=sum(f['receiver']['mbps'] for f in fl)
        print(n, ph, f'{mbps:.0f} Mbit/s', 'in flight', sum(f['sender']['in_flight_bytes'] for f in fl)//1024, 'KiB', 'srtt (us)', [f['sender']['rtt_us'] for f in fl])
