# usage: groups.py NAME...  -- per profile (NAME-one.txt, NAME-all.txt from roles.py), the per-byte
# cost of CPU 0 with one guest and with eight, and what grew, by group of symbols (all roles)
import sys,collections
G={'port ring: the kernel fills a slot (packet_lookup_frame, tpacket_rcv)':('packet_lookup_frame','tpacket_rcv'),
   'first reads and copies of packet data (_copy_from_iter, _copy_to_iter, memmove, memcpy, the daemon\'s checksum, the receiver\'s compare)':('_copy_from_iter','_copy_to_iter','__memmove','__pi_memcpy','sum_avx2','__memcmp'),
   'grant bookkeeping (Domain::unpin)':('Domain::unpin',),
   'context switches (finish_task_switch)':('finish_task_switch',),
   'TAP submission (io_submit_sqes, __io_prep_rw, __io_import_rw_buffer)':('io_submit_sqes','__io_prep_rw','__io_import_rw_buffer')}
def load(p):
    tot=0; d=collections.Counter()
    for l in open(p):
        f=l.split(None,2)
        if len(f)==2 and f[0]!='idle': tot+=float(f[1])
        elif len(f)==3:
            try: d[f[2].strip()]+=float(f[1])
            except ValueError: pass
    return tot,d
for n in sys.argv[1:]:
    (t1,a),(t8,b)=load(f'{n}-one.txt'),load(f'{n}-all.txt')
    print(f'== {n}: busy per byte, one guest {t1:.1f}, eight {t8:.1f} (+{t8-t1:.1f})')
    rest=t8-t1
    for g,keys in G.items():
        x=sum(v for s,v in a.items() if any(k in s for k in keys)); y=sum(v for s,v in b.items() if any(k in s for k in keys))
        rest-=y-x
        print(f'  {y-x:+5.1f}  ({x:.1f} -> {y:.1f})  {g}')
    print(f'  {rest:+5.1f}  the rest')
