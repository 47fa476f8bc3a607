== sample 1
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess
0      3437552     10.77.0.1:57088   10.77.0.10:5201
	 bbr wscale:10,10 rto:208 rtt:4.655/1.119 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1184 ssthresh:148 bytes_sent:1055256096 bytes_acked:1053570625 segs_out:728771 segs_in:7514 data_segs_out:728769 bbr:(bw:2802093952bps,mrtt:0.146,pacing_gain:1,cwnd_gain:2) send 2946392266bps lastrcv:3020 lastack:4 pacing_rate 2774073016bps delivery_rate 1581454448bps delivered:727606 busy:3020ms unacked:1164 rcv_space:14480 rcv_ssthresh:64088 notsent:1752080 minrtt:0.146 snd_wnd:4112384
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
346072 0         10.77.0.10:5201    10.77.0.1:57088
	 skmem:(r462464,rb6196772,t0,tb69120,f384,w0,o0,bl0,d0)
== sample 2
Recv-Q Send-Q Local Address:Port  Peer Address:PortProcess
0      0          10.77.0.1:57088   10.77.0.10:5201
	 bbr wscale:10,10 rto:204 rtt:2.959/0.256 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1342 ssthresh:148 bytes_sent:1368082016 bytes_acked:1368082017 segs_out:944811 segs_in:9375 data_segs_out:944809 bbr:(bw:3826388912bps,mrtt:0.146,pacing_gain:1,cwnd_gain:2) send 5253710037bps lastsnd:8 lastrcv:4064 lastack:4 pacing_rate 3788125016bps delivery_rate 3605876160bps delivered:944810 busy:4060ms rcv_space:14480 rcv_ssthresh:64088 minrtt:0.146 snd_wnd:4060160
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
616848 0         10.77.0.10:5201    10.77.0.1:57088
	 skmem:(r824064,rb6196772,t0,tb69120,f3328,w0,o0,bl0,d0)
== sample 3
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess
0      3068312     10.77.0.1:57088   10.77.0.10:5201
	 bbr wscale:10,10 rto:208 rtt:4.748/1.372 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1202 ssthresh:148 bytes_sent:1664349824 bytes_acked:1662646977 segs_out:1149416 segs_in:11103 data_segs_out:1149414 bbr:(bw:3012428848bps,mrtt:0.146,pacing_gain:1,cwnd_gain:2) send 2932596462bps lastrcv:5104 pacing_rate 2982304560bps delivery_rate 1231659760bps delivered:1148239 busy:5096ms unacked:1176 rcv_space:14480 rcv_ssthresh:64088 notsent:1365464 minrtt:0.146 snd_wnd:4112384
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.10:5201    10.77.0.1:57088
	 skmem:(r0,rb6196772,t0,tb69120,f0,w0,o0,bl0,d0)
