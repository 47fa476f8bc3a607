== sample 1
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                               
0      3162432     10.77.0.1:40998   10.77.0.10:5201
	 bbr wscale:10,10 rto:224 rtt:23.14/3.418 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:490 ssthresh:144 bytes_sent:104153072 bytes_acked:103447897 segs_out:71934 segs_in:3032 data_segs_out:71932 bbr:(bw:361118280bps,mrtt:0.052,pacing_gain:1,cwnd_gain:2) send 245296456bps lastsnd:4 lastrcv:3028 lastack:4 pacing_rate 357507096bps delivery_rate 231371504bps delivered:71446 busy:2976ms unacked:487 rcv_space:14480 rcv_ssthresh:64088 notsent:2457256 minrtt:0.052 snd_wnd:3148800                      
0      3672128     10.77.0.1:50372   10.77.0.16:5207
	 bbr wscale:10,10 rto:224 rtt:21.83/1.937 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:474 ssthresh:156 bytes_sent:89087592 bytes_acked:88401241 segs_out:61529 segs_in:2640 data_segs_out:61527 bbr:(bw:391365960bps,mrtt:0.262,pacing_gain:1,cwnd_gain:2) send 251526157bps lastsnd:4 lastrcv:2916 lastack:8 pacing_rate 387452296bps delivery_rate 178189840bps delivered:61054 busy:2908ms unacked:474 rcv_space:14480 rcv_ssthresh:64088 notsent:2985776 minrtt:0.262 snd_wnd:2219008                        
0      3211664     10.77.0.1:54582   10.77.0.13:5204
	 bbr wscale:10,10 rto:216 rtt:12.588/1.272 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:328 ssthresh:160 bytes_sent:85827336 bytes_acked:85414657 segs_out:59276 segs_in:3026 data_segs_out:59274 bbr:(bw:321224176bps,mrtt:0.462,pacing_gain:1.25,cwnd_gain:2) send 301839212bps lastsnd:4 lastrcv:2896 lastack:4 pacing_rate 397514920bps delivery_rate 266260592bps delivered:58990 busy:2896ms unacked:285 rcv_space:14480 rcv_ssthresh:64088 notsent:2798984 minrtt:0.462 snd_wnd:3551232                    
0      3440448     10.77.0.1:54536   10.77.0.12:5203
	 bbr wscale:10,10 rto:220 rtt:17.531/2.797 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:368 ssthresh:164 bytes_sent:89922280 bytes_acked:89760105 segs_out:62104 segs_in:2463 data_segs_out:62102 bbr:(bw:305887680bps,mrtt:0.576,pacing_gain:0.75,cwnd_gain:2) send 243164223bps lastrcv:2900 lastack:4 pacing_rate 227121600bps delivery_rate 68759544bps delivered:61991 busy:2900ms unacked:112 rcv_space:14480 rcv_ssthresh:64088 notsent:3278272 minrtt:0.576 snd_wnd:1569792                               
0      3570768     10.77.0.1:47230   10.77.0.17:5208
	 bbr wscale:10,10 rto:216 rtt:14.618/1.459 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:372 ssthresh:152 bytes_sent:85675296 bytes_acked:85288681 segs_out:59172 segs_in:2565 data_segs_out:59170 bbr:(bw:313002176bps,mrtt:0.262,pacing_gain:1,cwnd_gain:2) send 294790532bps lastsnd:4 lastrcv:2896 lastack:4 pacing_rate 309872160bps delivery_rate 226388176bps delivered:58904 busy:2896ms rwnd_limited:4ms(0.1%) unacked:267 rcv_space:14480 rcv_ssthresh:64088 notsent:3184152 minrtt:0.262 snd_wnd:2137088
0      3967288     10.77.0.1:38688   10.77.0.15:5206
	 bbr wscale:10,10 rto:212 rtt:9.307/2.292 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:396 ssthresh:156 bytes_sent:82869304 bytes_acked:82523233 segs_out:57234 segs_in:2149 data_segs_out:57232 bbr:(bw:320733264bps,mrtt:0.473,pacing_gain:1,cwnd_gain:2) send 492883206bps lastrcv:2908 lastack:4 pacing_rate 317525928bps delivery_rate 142353296bps delivered:56994 busy:2900ms rwnd_limited:12ms(0.4%) unacked:239 rcv_space:14480 rcv_ssthresh:64088 notsent:3621216 minrtt:0.473 snd_wnd:1105920          
0      2454360     10.77.0.1:38918   10.77.0.11:5202
	 bbr wscale:10,10 rto:208 rtt:5.5/1.413 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:378 ssthresh:142 bytes_sent:87502728 bytes_acked:87207337 segs_out:60435 segs_in:2665 data_segs_out:60433 bbr:(bw:347115744bps,mrtt:0.092,pacing_gain:1,cwnd_gain:2) send 796136727bps lastsnd:4 lastrcv:2928 lastack:4 pacing_rate 343644584bps delivery_rate 212092616bps delivered:60230 busy:2916ms unacked:204 rcv_space:14480 rcv_ssthresh:64088 notsent:2158968 minrtt:0.092 snd_wnd:2372608                          
0      4191960     10.77.0.1:58404   10.77.0.14:5205
	 bbr wscale:10,10 rto:216 rtt:14.462/3.424 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:406 ssthresh:186 bytes_sent:85781000 bytes_acked:85193113 segs_out:59244 segs_in:2273 data_segs_out:59242 bbr:(bw:368153376bps,mrtt:0.291,pacing_gain:1,cwnd_gain:2) send 325204259bps lastsnd:4 lastrcv:2896 lastack:8 pacing_rate 364471840bps delivery_rate 94294456bps delivered:58837 busy:2896ms rwnd_limited:4ms(0.1%) unacked:406 rcv_space:14480 rcv_ssthresh:64088 notsent:3604072 minrtt:0.291 snd_wnd:1316864 
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.10:5201    10.77.0.1:40998
	 skmem:(r0,rb4744999,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.11:5202    10.77.0.1:38918
	 skmem:(r0,rb3576048,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.12:5203    10.77.0.1:54536
	 skmem:(r0,rb2417043,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.13:5204    10.77.0.1:54582
	 skmem:(r0,rb5350930,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.14:5205    10.77.0.1:58404
	 skmem:(r0,rb1986210,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.15:5206    10.77.0.1:38688
	 skmem:(r0,rb1718723,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.16:5207    10.77.0.1:50372
	 skmem:(r0,rb3344380,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.17:5208    10.77.0.1:47230
	 skmem:(r0,rb3270942,t0,tb69120,f0,w0,o0,bl0,d0)
== sample 2
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                 
0      4081912     10.77.0.1:40998   10.77.0.10:5201
	 bbr wscale:10,10 rto:212 rtt:10.056/3.761 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:332 ssthresh:144 bytes_sent:137278968 bytes_acked:136932897 segs_out:94811 segs_in:3753 data_segs_out:94809 bbr:(bw:250909784bps,mrtt:0.052,pacing_gain:0.75,cwnd_gain:2) send 382447096bps lastrcv:4084 lastack:8 pacing_rate 186300512bps delivery_rate 250909888bps delivered:94571 busy:4032ms unacked:239 rcv_space:14480 rcv_ssthresh:64088 notsent:3735840 minrtt:0.052 snd_wnd:3115008              
0      4050056     10.77.0.1:50372   10.77.0.16:5207
	 bbr wscale:10,10 rto:220 rtt:16.357/4.684 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:294 ssthresh:156 bytes_sent:122375664 bytes_acked:122101993 segs_out:84518 segs_in:3365 data_segs_out:84516 bbr:(bw:270278568bps,mrtt:0.262,pacing_gain:1,cwnd_gain:2) send 208210308bps lastrcv:3972 pacing_rate 267575784bps delivery_rate 127499200bps delivered:84328 busy:3964ms unacked:189 rcv_space:14480 rcv_ssthresh:64088 notsent:3776384 minrtt:0.262 snd_wnd:2185216                           
0      3242072     10.77.0.1:54582   10.77.0.13:5204
	 bbr wscale:10,10 rto:216 rtt:13.603/1.125 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:406 ssthresh:160 bytes_sent:121154192 bytes_acked:120700969 segs_out:83673 segs_in:3787 data_segs_out:83671 bbr:(bw:318426432bps,mrtt:0.462,pacing_gain:1.25,cwnd_gain:2) send 345740204bps lastrcv:3952 pacing_rate 394052712bps delivery_rate 226167168bps delivered:83359 busy:3952ms unacked:313 rcv_space:14480 rcv_ssthresh:64088 notsent:2788848 minrtt:0.462 snd_wnd:3517440                        
0      2812016     10.77.0.1:54536   10.77.0.12:5203
	 bbr wscale:10,10 rto:220 rtt:19.894/6.897 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:696 ssthresh:164 bytes_sent:123699776 bytes_acked:122707897 segs_out:85431 segs_in:3172 data_segs_out:85429 bbr:(bw:322568504bps,mrtt:0.576,pacing_gain:1,cwnd_gain:2) send 405271137bps lastsnd:8 lastrcv:3956 lastack:4 pacing_rate 319342816bps delivery_rate 166249096bps delivered:84745 busy:3956ms unacked:685 rcv_space:14480 rcv_ssthresh:64088 notsent:1820136 minrtt:0.576 snd_wnd:1602560       
0      2851112     10.77.0.1:47230   10.77.0.17:5208
	 bbr wscale:10,10 rto:216 rtt:12.751/2.62 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:346 ssthresh:152 bytes_sent:118659288 bytes_acked:118392857 segs_out:81951 segs_in:3280 data_segs_out:81949 bbr:(bw:292959496bps,mrtt:0.262,pacing_gain:1,cwnd_gain:2) send 314333307bps lastrcv:3952 pacing_rate 290029904bps delivery_rate 188947064bps delivered:81766 busy:3952ms rwnd_limited:4ms(0.1%) unacked:184 rcv_space:14480 rcv_ssthresh:64088 notsent:2584680 minrtt:0.262 snd_wnd:2137088     
0      3312792     10.77.0.1:38688   10.77.0.15:5206
	 bbr wscale:10,10 rto:224 rtt:23.675/3.938 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:498 ssthresh:156 bytes_sent:117521392 bytes_acked:116800289 segs_out:81165 segs_in:3234 data_segs_out:81163 bbr:(bw:298784224bps,mrtt:0.473,pacing_gain:1.25,cwnd_gain:2) send 243667666bps lastrcv:3964 pacing_rate 369745472bps delivery_rate 216721400bps delivered:80666 busy:3956ms rwnd_limited:12ms(0.3%) unacked:498 rcv_space:14480 rcv_ssthresh:64088 notsent:2591688 minrtt:0.473 snd_wnd:2169856
0      2586128     10.77.0.1:38918   10.77.0.11:5202
	 bbr wscale:10,10 rto:212 rtt:11.928/1.759 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:348 ssthresh:142 bytes_sent:118534816 bytes_acked:118156889 segs_out:81866 segs_in:3329 data_segs_out:81864 bbr:(bw:308855272bps,mrtt:0.092,pacing_gain:1.25,cwnd_gain:2) send 337963783bps lastrcv:3984 pacing_rate 382208400bps delivery_rate 200192376bps delivered:81604 busy:3972ms unacked:261 rcv_space:14480 rcv_ssthresh:64088 notsent:2208200 minrtt:0.092 snd_wnd:2372608                        
0      4168792     10.77.0.1:58404   10.77.0.14:5205
	 bbr wscale:10,10 rto:212 rtt:10.785/1.228 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:446 ssthresh:186 bytes_sent:117448760 bytes_acked:116818881 segs_out:81114 segs_in:2955 data_segs_out:81112 bbr:(bw:362658696bps,mrtt:0.291,pacing_gain:1,cwnd_gain:2) send 479041632bps lastrcv:3952 lastack:4 pacing_rate 359032112bps delivery_rate 245758736bps delivered:80678 busy:3952ms rwnd_limited:4ms(0.1%) unacked:435 rcv_space:14480 rcv_ssthresh:64088 notsent:3538912 minrtt:0.291 snd_wnd:1316864
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.10:5201    10.77.0.1:40998
	 skmem:(r0,rb4744999,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.11:5202    10.77.0.1:38918
	 skmem:(r0,rb3576048,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.12:5203    10.77.0.1:54536
	 skmem:(r0,rb2417043,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
34752  0         10.77.0.13:5204    10.77.0.1:54582
	 skmem:(r46592,rb5350930,t0,tb69120,f2560,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.14:5205    10.77.0.1:58404
	 skmem:(r0,rb1986210,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.15:5206    10.77.0.1:38688
	 skmem:(r0,rb3270942,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.16:5207    10.77.0.1:50372
	 skmem:(r0,rb3344380,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.17:5208    10.77.0.1:47230
	 skmem:(r0,rb3270942,t0,tb69120,f0,w0,o0,bl0,d0)
== sample 3
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                 
0      4145624     10.77.0.1:40998   10.77.0.10:5201
	 bbr wscale:10,10 rto:220 rtt:18.83/3.008 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:264 ssthresh:144 bytes_sent:170164496 bytes_acked:169774985 segs_out:117522 segs_in:4466 data_segs_out:117520 bbr:(bw:381063600bps,mrtt:0.052,pacing_gain:0.75,cwnd_gain:2) send 162409772bps lastsnd:4 lastrcv:5152 lastack:4 pacing_rate 282939720bps delivery_rate 153769904bps delivered:117252 busy:5100ms unacked:269 rcv_space:14480 rcv_ssthresh:64088 notsent:3756112 minrtt:0.052 snd_wnd:3148800  
0      4099288     10.77.0.1:50372   10.77.0.16:5207
	 bbr wscale:10,10 rto:216 rtt:14.027/2.631 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:392 ssthresh:156 bytes_sent:154246144 bytes_acked:153916001 segs_out:106528 segs_in:4050 data_segs_out:106526 bbr:(bw:259675864bps,mrtt:0.262,pacing_gain:1,cwnd_gain:2) send 323727668bps lastrcv:5040 lastack:4 pacing_rate 257079104bps delivery_rate 259676352bps delivered:106299 busy:5032ms unacked:228 rcv_space:14480 rcv_ssthresh:64088 notsent:3769144 minrtt:0.262 snd_wnd:2219008              
0      4189064     10.77.0.1:54582   10.77.0.13:5204
	 bbr wscale:10,10 rto:224 rtt:21.061/2.914 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:352 ssthresh:160 bytes_sent:157112376 bytes_acked:156634537 segs_out:108506 segs_in:4559 data_segs_out:108504 bbr:(bw:279068824bps,mrtt:0.462,pacing_gain:0.75,cwnd_gain:2) send 193607521bps lastrcv:5020 pacing_rate 207208600bps delivery_rate 173668304bps delivered:108175 busy:5020ms unacked:330 rcv_space:14480 rcv_ssthresh:64088 notsent:3711224 minrtt:0.462 snd_wnd:3551232                     
0      3536016     10.77.0.1:54536   10.77.0.12:5203
	 bbr wscale:10,10 rto:216 rtt:15.196/2.216 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:328 ssthresh:164 bytes_sent:156353624 bytes_acked:155932257 segs_out:107982 segs_in:3887 data_segs_out:107980 bbr:(bw:288537104bps,mrtt:0.576,pacing_gain:1.25,cwnd_gain:2) send 250036325bps lastrcv:5024 pacing_rate 357064664bps delivery_rate 156581864bps delivered:107690 busy:5024ms unacked:291 rcv_space:14480 rcv_ssthresh:64088 notsent:3114648 minrtt:0.576 snd_wnd:1569792                     
0      3504160     10.77.0.1:47230   10.77.0.17:5208
	 bbr wscale:10,10 rto:220 rtt:19.972/4.717 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:498 ssthresh:152 bytes_sent:152213792 bytes_acked:151492689 segs_out:105124 segs_in:3999 data_segs_out:105122 bbr:(bw:393368296bps,mrtt:0.262,pacing_gain:1,cwnd_gain:2) send 288845984bps lastrcv:5020 pacing_rate 389434608bps delivery_rate 182717432bps delivered:104625 busy:5020ms rwnd_limited:4ms(0.1%) unacked:498 rcv_space:14480 rcv_ssthresh:64088 notsent:2783056 minrtt:0.262 snd_wnd:2169856 
0      3182472     10.77.0.1:38688   10.77.0.15:5206
	 bbr wscale:10,10 rto:228 rtt:24.363/2.126 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:414 ssthresh:156 bytes_sent:151584144 bytes_acked:151009289 segs_out:104689 segs_in:3969 data_segs_out:104687 bbr:(bw:307114624bps,mrtt:0.473,pacing_gain:1,cwnd_gain:2) send 196846694bps lastrcv:5032 pacing_rate 304043480bps delivery_rate 158008520bps delivered:104291 busy:5024ms rwnd_limited:12ms(0.2%) unacked:397 rcv_space:14480 rcv_ssthresh:64088 notsent:2607616 minrtt:0.473 snd_wnd:2137088
0      2531104     10.77.0.1:38918   10.77.0.11:5202
	 bbr wscale:10,10 rto:220 rtt:19.221/2.367 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:416 ssthresh:142 bytes_sent:151427584 bytes_acked:151052553 segs_out:104582 segs_in:4039 data_segs_out:104580 bbr:(bw:434354704bps,mrtt:0.092,pacing_gain:0.75,cwnd_gain:2) send 250712450bps lastrcv:5052 pacing_rate 322508368bps delivery_rate 246413472bps delivered:104322 busy:5040ms unacked:259 rcv_space:14480 rcv_ssthresh:64088 notsent:2156072 minrtt:0.092 snd_wnd:2338816                     
0      4090600     10.77.0.1:58404   10.77.0.14:5205
	 bbr wscale:10,10 rto:220 rtt:18.422/1.951 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:232 ssthresh:186 bytes_sent:149878168 bytes_acked:149542233 segs_out:103510 segs_in:3700 data_segs_out:103508 bbr:(bw:360066016bps,mrtt:0.291,pacing_gain:0.75,cwnd_gain:2) send 145884703bps lastsnd:4 lastrcv:5020 lastack:4 pacing_rate 267349016bps delivery_rate 139150384bps delivered:103277 busy:5020ms rwnd_limited:4ms(0.1%) unacked:232 rcv_space:14480 rcv_ssthresh:64088 notsent:3754664 minrtt:0.291 snd_wnd:1433600
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.10:5201    10.77.0.1:40998
	 skmem:(r0,rb4744999,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.11:5202    10.77.0.1:38918
	 skmem:(r0,rb3576048,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.12:5203    10.77.0.1:54536
	 skmem:(r0,rb2417043,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.13:5204    10.77.0.1:54582
	 skmem:(r0,rb5350930,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.14:5205    10.77.0.1:58404
	 skmem:(r0,rb2162627,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.15:5206    10.77.0.1:38688
	 skmem:(r0,rb3270942,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.16:5207    10.77.0.1:50372
	 skmem:(r0,rb3344380,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.17:5208    10.77.0.1:47230
	 skmem:(r0,rb3270942,t0,tb69120,f0,w0,o0,bl0,d0)
