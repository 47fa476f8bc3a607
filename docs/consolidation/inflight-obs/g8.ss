== sample 1
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                  
0      4166896     10.77.0.1:40016   10.77.0.16:5207
	 bbr wscale:10,10 rto:240 rtt:37.975/7.828 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1344 ssthresh:110 bytes_sent:93225616 bytes_acked:91839881 segs_out:64386 segs_in:1638 data_segs_out:64384 bbr:(bw:325535408bps,mrtt:0.284,pacing_gain:1,cwnd_gain:2) send 409977512bps lastrcv:2880 lastack:4 pacing_rate 322280056bps delivery_rate 272148656bps delivered:63428 busy:2880ms rwnd_limited:40ms(1.4%) unacked:957 rcv_space:14480 rcv_ssthresh:64088 notsent:2781160 minrtt:0.284 snd_wnd:3126272           
0      4152864     10.77.0.1:54852   10.77.0.14:5205
	 bbr wscale:10,10 rto:260 rtt:57.639/12.081 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1506 ssthresh:142 bytes_sent:91455712 bytes_acked:89777481 segs_out:63163 segs_in:3138 data_segs_out:63161 bbr:(bw:326022880bps,mrtt:0.23,pacing_gain:0.75,cwnd_gain:2) send 302668402bps lastrcv:2884 lastack:4 pacing_rate 242071984bps delivery_rate 157114288bps delivered:62003 busy:2884ms unacked:1159 rcv_space:14480 rcv_ssthresh:64088 notsent:2474632 minrtt:0.23 snd_wnd:7279616                                
0      4074672     10.77.0.1:37496   10.77.0.10:5201
	 bbr wscale:10,10 rto:232 rtt:31.244/4.577 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1168 ssthresh:140 bytes_sent:130362912 bytes_acked:128777353 segs_out:90036 segs_in:5242 data_segs_out:90034 bbr:(bw:433700832bps,mrtt:0.092,pacing_gain:1,cwnd_gain:2) send 433046729bps lastrcv:3028 lastack:4 pacing_rate 429363824bps delivery_rate 274556584bps delivered:88940 busy:3008ms rwnd_limited:4ms(0.1%) unacked:1095 rcv_space:14480 rcv_ssthresh:64088 notsent:2489112 minrtt:0.092 snd_wnd:13131776        
0      2871080     10.77.0.1:59738   10.77.0.13:5204
	 bbr wscale:10,10 rto:252 rtt:51.141/7.312 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1684 ssthresh:150 bytes_sent:99143448 bytes_acked:97384129 segs_out:68473 segs_in:2493 data_segs_out:68471 bbr:(bw:443228496bps,mrtt:0.253,pacing_gain:1,cwnd_gain:2) send 381444555bps lastrcv:2908 lastack:8 pacing_rate 438796208bps delivery_rate 249677984bps delivered:67257 busy:2900ms rwnd_limited:36ms(1.2%) unacked:1215 rcv_space:14480 rcv_ssthresh:64088 notsent:1111760 minrtt:0.253 snd_wnd:5402624          
0      3053840     10.77.0.1:53572   10.77.0.12:5203
	 bbr wscale:10,10 rto:264 rtt:61.317/8.488 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1486 ssthresh:140 bytes_sent:99872928 bytes_acked:97877585 segs_out:68978 segs_in:1942 data_segs_out:68976 bbr:(bw:433841000bps,mrtt:0.045,pacing_gain:1,cwnd_gain:2) send 280734935bps lastrcv:2896 pacing_rate 429502592bps delivery_rate 225598344bps delivered:67599 busy:2892ms rwnd_limited:28ms(1.0%) unacked:1378 rcv_space:14480 rcv_ssthresh:64088 notsent:1058496 minrtt:0.045 snd_wnd:3932160                    
0      3793128     10.77.0.1:53792   10.77.0.17:5208
	 bbr wscale:10,10 rto:244 rtt:42.868/10.726 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:826 ssthresh:146 bytes_sent:98463216 bytes_acked:97235313 segs_out:68003 segs_in:3043 data_segs_out:68001 bbr:(bw:344625256bps,mrtt:0.304,pacing_gain:1,cwnd_gain:2) send 223205748bps lastsnd:16 lastrcv:2892 lastack:16 pacing_rate 341179000bps delivery_rate 203386448bps delivered:67154 busy:2884ms rwnd_limited:4ms(0.1%) unacked:848 rcv_space:14480 rcv_ssthresh:64088 notsent:2565224 minrtt:0.304 snd_wnd:6920192
0      3518640     10.77.0.1:58962   10.77.0.11:5202
	 bbr wscale:10,10 rto:232 rtt:28.32/5.365 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:968 ssthresh:140 bytes_sent:92156544 bytes_acked:90788185 segs_out:63648 segs_in:2874 data_segs_out:63646 bbr:(bw:414584064bps,mrtt:0.26,pacing_gain:0.75,cwnd_gain:2) send 395950282bps lastsnd:8 lastrcv:2900 lastack:20 pacing_rate 307828664bps delivery_rate 186502232bps delivered:62702 busy:2888ms unacked:945 rcv_space:14480 rcv_ssthresh:64088 notsent:2150280 minrtt:0.26 snd_wnd:6665216                         
0      4035576     10.77.0.1:47910   10.77.0.15:5206
	 bbr wscale:10,10 rto:232 rtt:28.141/4.892 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1174 ssthresh:90 bytes_sent:94615248 bytes_acked:92915297 segs_out:65347 segs_in:2832 data_segs_out:65345 bbr:(bw:499309744bps,mrtt:0.336,pacing_gain:1.25,cwnd_gain:2) send 483266977bps lastrcv:2888 lastack:16 pacing_rate 617895808bps delivery_rate 468220528bps delivered:64172 busy:2888ms rwnd_limited:12ms(0.4%) unacked:1174 rcv_space:14480 rcv_ssthresh:64088 notsent:2335624 minrtt:0.336 snd_wnd:6525952       
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.10:5201    10.77.0.1:37496
	 skmem:(r0,rb19778984,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.11:5202    10.77.0.1:58962
	 skmem:(r0,rb10336512,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.12:5203    10.77.0.1:53572
	 skmem:(r0,rb5924704,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.13:5204    10.77.0.1:59738
	 skmem:(r0,rb8327107,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.14:5205    10.77.0.1:54852
	 skmem:(r0,rb11387663,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.15:5206    10.77.0.1:47910
	 skmem:(r0,rb9960658,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.16:5207    10.77.0.1:40016
	 skmem:(r0,rb4711854,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.17:5208    10.77.0.1:53792
	 skmem:(r0,rb10846701,t0,tb69120,f0,w0,o0,bl0,d0)
== sample 2
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                        
0      3878744     10.77.0.1:40016   10.77.0.16:5207
	 bbr wscale:10,10 rto:236 rtt:33.611/6.654 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1122 ssthresh:110 bytes_sent:125620272 bytes_acked:124838353 segs_out:86758 segs_in:1825 data_segs_out:86756 bbr:(bw:332666488bps,mrtt:0.284,pacing_gain:0.75,cwnd_gain:2) send 386696260bps lastsnd:4 lastrcv:3944 lastack:16 pacing_rate 247004864bps delivery_rate 120028072bps delivered:86217 busy:3944ms rwnd_limited:40ms(1.0%) unacked:540 rcv_space:14480 rcv_ssthresh:64088 notsent:3096824 minrtt:0.284 snd_wnd:2936832 
0      2920616     10.77.0.1:54852   10.77.0.14:5205
	 bbr wscale:10,10 rto:220 rtt:19.245/10.41 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1106 ssthresh:142 bytes_sent:126193232 bytes_acked:125414209 segs_out:87153 segs_in:3361 data_segs_out:87151 bbr:(bw:306000912bps,mrtt:0.23,pacing_gain:1,cwnd_gain:2) send 665726370bps lastrcv:3948 lastack:8 pacing_rate 302940904bps delivery_rate 108528208bps delivered:86614 busy:3948ms unacked:538 rcv_space:14480 rcv_ssthresh:64088 notsent:2141592 minrtt:0.23 snd_wnd:7560192                                         
0      4181824     10.77.0.1:37496   10.77.0.10:5201
	 bbr wscale:10,10 rto:228 rtt:26.534/9.603 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1186 ssthresh:140 bytes_sent:168571288 bytes_acked:166853961 segs_out:116423 segs_in:5467 data_segs_out:116421 bbr:(bw:349787824bps,mrtt:0.092,pacing_gain:1,cwnd_gain:2) send 517774327bps lastsnd:8 lastrcv:4092 lastack:16 pacing_rate 346289952bps delivery_rate 164846376bps delivered:115236 busy:4072ms rwnd_limited:4ms(0.1%) unacked:1186 rcv_space:14480 rcv_ssthresh:64088 notsent:2464496 minrtt:0.092 snd_wnd:13131776
0      3799248     10.77.0.1:59738   10.77.0.13:5204
	 bbr wscale:10,10 rto:244 rtt:42.494/7.875 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1212 ssthresh:150 bytes_sent:133152624 bytes_acked:132098481 segs_out:91960 segs_in:2700 data_segs_out:91958 bbr:(bw:307608304bps,mrtt:0.253,pacing_gain:1,cwnd_gain:2) send 330395068bps lastrcv:3972 lastack:16 pacing_rate 304532216bps delivery_rate 233868624bps delivered:91231 busy:3964ms rwnd_limited:36ms(0.9%) unacked:728 rcv_space:14480 rcv_ssthresh:64088 notsent:2745104 minrtt:0.253 snd_wnd:5248000              
0      3085696     10.77.0.1:53572   10.77.0.12:5203
	 bbr wscale:10,10 rto:240 rtt:37.123/5.691 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:848 ssthresh:140 bytes_sent:136320536 bytes_acked:135117249 segs_out:94149 segs_in:2166 data_segs_out:94147 bbr:(bw:346927944bps,mrtt:0.045,pacing_gain:1,cwnd_gain:2) send 264613097bps lastsnd:4 lastrcv:3960 lastack:8 pacing_rate 343458664bps delivery_rate 171057680bps delivered:93317 busy:3956ms rwnd_limited:28ms(0.7%) unacked:831 rcv_space:14480 rcv_ssthresh:64088 notsent:1882408 minrtt:0.045 snd_wnd:3932160      
0      3771408     10.77.0.1:53792   10.77.0.17:5208
	 bbr wscale:10,10 rto:260 rtt:59.088/8.312 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1138 ssthresh:146 bytes_sent:131985864 bytes_acked:130814433 segs_out:91154 segs_in:3254 data_segs_out:91152 bbr:(bw:328830288bps,mrtt:0.304,pacing_gain:1.25,cwnd_gain:2) send 223101002bps lastrcv:3956 lastack:4 pacing_rate 406927480bps delivery_rate 190548344bps delivered:90344 busy:3948ms rwnd_limited:4ms(0.1%) unacked:809 rcv_space:14480 rcv_ssthresh:64088 notsent:2599976 minrtt:0.304 snd_wnd:7200768             
0      4165896     10.77.0.1:58962   10.77.0.11:5202
	 bbr wscale:10,10 rto:256 rtt:54.818/9.612 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1272 ssthresh:140 bytes_sent:127807752 bytes_acked:125978929 segs_out:88269 segs_in:3078 data_segs_out:88267 bbr:(bw:435876480bps,mrtt:0.26,pacing_gain:1,cwnd_gain:2) send 268795797bps lastsnd:12 lastrcv:3964 lastack:20 pacing_rate 431517712bps delivery_rate 197059816bps delivered:87005 busy:3952ms unacked:1263 rcv_space:14480 rcv_ssthresh:64088 notsent:2337072 minrtt:0.26 snd_wnd:6861824                            
0      3699640     10.77.0.1:47910   10.77.0.15:5206
	 bbr wscale:10,10 rto:232 rtt:28.883/10.159 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1138 ssthresh:90 bytes_sent:130454696 bytes_acked:129349873 segs_out:90098 segs_in:3049 data_segs_out:90096 bbr:(bw:338450472bps,mrtt:0.336,pacing_gain:0.75,cwnd_gain:2) send 456413530bps lastsnd:4 lastrcv:3952 lastack:8 pacing_rate 251299472bps delivery_rate 145288952bps delivered:89334 busy:3952ms rwnd_limited:12ms(0.3%) unacked:763 rcv_space:14480 rcv_ssthresh:64088 notsent:2594816 minrtt:0.336 snd_wnd:6611968  
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.10:5201    10.77.0.1:37496
	 skmem:(r0,rb19778984,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.11:5202    10.77.0.1:58962
	 skmem:(r0,rb10336512,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.12:5203    10.77.0.1:53572
	 skmem:(r0,rb5924704,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.13:5204    10.77.0.1:59738
	 skmem:(r0,rb8327107,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.14:5205    10.77.0.1:54852
	 skmem:(r0,rb11387663,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.15:5206    10.77.0.1:47910
	 skmem:(r0,rb9960658,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.16:5207    10.77.0.1:40016
	 skmem:(r0,rb4711854,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.17:5208    10.77.0.1:53792
	 skmem:(r0,rb10846701,t0,tb69120,f0,w0,o0,bl0,d0)
== sample 3
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                        
0      4179928     10.77.0.1:40016   10.77.0.16:5207
	 bbr wscale:10,10 rto:264 rtt:60.661/15.836 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:892 ssthresh:110 bytes_sent:158223440 bytes_acked:157312649 segs_out:109274 segs_in:2015 data_segs_out:109272 bbr:(bw:449379112bps,mrtt:0.284,pacing_gain:1,cwnd_gain:2) send 170338900bps lastsnd:4 lastrcv:5016 lastack:8 pacing_rate 444885328bps delivery_rate 202852720bps delivered:108644 busy:5016ms rwnd_limited:40ms(0.8%) unacked:629 rcv_space:14480 rcv_ssthresh:64088 notsent:3269136 minrtt:0.284 snd_wnd:2846720  
0      4181824     10.77.0.1:54852   10.77.0.14:5205
	 bbr wscale:10,10 rto:260 rtt:59.059/8.358 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1304 ssthresh:142 bytes_sent:163573352 bytes_acked:161685161 segs_out:112968 segs_in:3569 data_segs_out:112966 bbr:(bw:963548952bps,mrtt:0.23,pacing_gain:1,cwnd_gain:2) send 255770264bps lastsnd:8 lastrcv:5020 lastack:8 pacing_rate 953913464bps delivery_rate 251724744bps delivered:111663 busy:5020ms unacked:1304 rcv_space:14480 rcv_ssthresh:64088 notsent:2293632 minrtt:0.23 snd_wnd:7560192                           
0      4171688     10.77.0.1:37496   10.77.0.10:5201
	 bbr wscale:10,10 rto:256 rtt:53.726/13.955 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1450 ssthresh:140 bytes_sent:203191520 bytes_acked:202180817 segs_out:140332 segs_in:5678 data_segs_out:140330 bbr:(bw:898241768bps,mrtt:0.092,pacing_gain:1,cwnd_gain:2) send 312638201bps lastrcv:5164 lastack:4 pacing_rate 889259352bps delivery_rate 317386840bps delivered:139633 busy:5144ms rwnd_limited:4ms(0.1%) unacked:698 rcv_space:14480 rcv_ssthresh:64088 notsent:3160984 minrtt:0.092 snd_wnd:12852224           
0      4165592     10.77.0.1:59738   10.77.0.13:5204
	 bbr wscale:10,10 rto:228 rtt:27.514/6.689 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:974 ssthresh:150 bytes_sent:166397256 bytes_acked:166071457 segs_out:114919 segs_in:2900 data_segs_out:114917 bbr:(bw:245439264bps,mrtt:0.253,pacing_gain:1,cwnd_gain:2) send 410075452bps lastsnd:4 lastrcv:5044 lastack:12 pacing_rate 242984872bps delivery_rate 216642464bps delivered:114693 busy:5036ms rwnd_limited:36ms(0.7%) unacked:225 rcv_space:14480 rcv_ssthresh:64088 notsent:3839792 minrtt:0.253 snd_wnd:5402624  
0      4165904     10.77.0.1:53572   10.77.0.12:5203
	 bbr wscale:10,10 rto:252 rtt:49.71/8.27 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1132 ssthresh:140 bytes_sent:174637512 bytes_acked:173067881 segs_out:120611 segs_in:2393 data_segs_out:120609 bbr:(bw:588084976bps,mrtt:0.045,pacing_gain:0.75,cwnd_gain:2) send 263791752bps lastsnd:4 lastrcv:5032 lastack:4 pacing_rate 436653096bps delivery_rate 279718344bps delivered:119526 busy:5028ms rwnd_limited:28ms(0.6%) unacked:1084 rcv_space:14480 rcv_ssthresh:64088 notsent:2596272 minrtt:0.045 snd_wnd:3652608
0      3513664     10.77.0.1:53792   10.77.0.17:5208
	 bbr wscale:10,10 rto:240 rtt:39.058/9.246 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:626 ssthresh:146 bytes_sent:163769464 bytes_acked:163261217 segs_out:113104 segs_in:3456 data_segs_out:113102 bbr:(bw:322437320bps,mrtt:0.304,pacing_gain:1,cwnd_gain:2) send 185661939bps lastrcv:5028 lastack:4 pacing_rate 319212944bps delivery_rate 135483640bps delivered:112752 busy:5020ms rwnd_limited:4ms(0.1%) unacked:351 rcv_space:14480 rcv_ssthresh:64088 notsent:3005416 minrtt:0.304 snd_wnd:6920192              
0      4165896     10.77.0.1:58962   10.77.0.11:5202
	 bbr wscale:10,10 rto:256 rtt:53.928/4.914 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1126 ssthresh:140 bytes_sent:163748560 bytes_acked:162664009 segs_out:113090 segs_in:3287 data_segs_out:113088 bbr:(bw:364003024bps,mrtt:0.26,pacing_gain:1,cwnd_gain:2) send 241870346bps lastsnd:4 lastrcv:5036 lastack:4 pacing_rate 360362992bps delivery_rate 275873792bps delivered:112340 busy:5024ms unacked:749 rcv_space:14480 rcv_ssthresh:64088 notsent:3081344 minrtt:0.26 snd_wnd:6582272                            
0      4149968     10.77.0.1:47910   10.77.0.15:5206
	 bbr wscale:10,10 rto:292 rtt:90.523/26.316 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1346 ssthresh:90 bytes_sent:164666592 bytes_acked:162717585 segs_out:113725 segs_in:3253 data_segs_out:113723 bbr:(bw:786244296bps,mrtt:0.336,pacing_gain:1.25,cwnd_gain:2) send 172244225bps lastsnd:4 lastrcv:5024 lastack:8 pacing_rate 972977312bps delivery_rate 141964856bps delivered:112378 busy:5024ms rwnd_limited:12ms(0.2%) unacked:1346 rcv_space:14480 rcv_ssthresh:64088 notsent:2200960 minrtt:0.336 snd_wnd:6332416
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.10:5201    10.77.0.1:37496
	 skmem:(r0,rb19778984,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.11:5202    10.77.0.1:58962
	 skmem:(r0,rb10336512,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.12:5203    10.77.0.1:53572
	 skmem:(r0,rb5924704,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.13:5204    10.77.0.1:59738
	 skmem:(r0,rb8327107,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.14:5205    10.77.0.1:54852
	 skmem:(r0,rb11387663,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.15:5206    10.77.0.1:47910
	 skmem:(r0,rb9960658,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.16:5207    10.77.0.1:40016
	 skmem:(r0,rb4711854,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.17:5208    10.77.0.1:53792
	 skmem:(r0,rb10846701,t0,tb69120,f0,w0,o0,bl0,d0)
