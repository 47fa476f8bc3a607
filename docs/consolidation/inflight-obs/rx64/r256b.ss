== sample 1
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                      
0      3829248     10.77.0.1:40806   10.77.0.14:5205
	 bbr wscale:10,10 rto:252 rtt:50.643/12.727 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1212 ssthresh:114 bytes_sent:96578000 bytes_acked:94823025 segs_out:66702 segs_in:2292 data_segs_out:66700 bbr:(bw:409271664bps,mrtt:0.579,pacing_gain:1.25,cwnd_gain:2) send 277230970bps lastsnd:4 lastrcv:2988 lastack:4 pacing_rate 506473688bps delivery_rate 240041680bps delivered:65489 busy:2988ms rwnd_limited:24ms(0.8%) unacked:1212 rcv_space:14480 rcv_ssthresh:64088 notsent:2074272 minrtt:0.579 snd_wnd:4993024
0      3430272     10.77.0.1:58848   10.77.0.13:5204
	 bbr wscale:10,10 rto:260 rtt:56.775/6.303 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1632 ssthresh:150 bytes_sent:97909488 bytes_acked:95976409 segs_out:67625 segs_in:3328 data_segs_out:67623 bbr:(bw:463765544bps,mrtt:0.407,pacing_gain:0.75,cwnd_gain:2) send 332982616bps lastrcv:3008 lastack:4 pacing_rate 344345912bps delivery_rate 232570304bps delivered:66289 busy:3000ms rwnd_limited:184ms(6.1%) unacked:1335 rcv_space:14480 rcv_ssthresh:64088 notsent:1497192 minrtt:0.407 snd_wnd:7620608          
0      3037032     10.77.0.1:56094   10.77.0.12:5203
	 bbr wscale:10,10 rto:244 rtt:41.306/10.921 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1076 ssthresh:152 bytes_sent:100069288 bytes_acked:98719753 segs_out:69112 segs_in:2606 data_segs_out:69110 bbr:(bw:344289000bps,mrtt:0.585,pacing_gain:1,cwnd_gain:2) send 301757227bps lastrcv:3016 lastack:8 pacing_rate 340846112bps delivery_rate 181205912bps delivered:68179 busy:3000ms rwnd_limited:4ms(0.1%) unacked:932 rcv_space:14480 rcv_ssthresh:64088 notsent:1687496 minrtt:0.585 snd_wnd:5866496              
0      4146312     10.77.0.1:58482   10.77.0.16:5207
	 bbr wscale:10,10 rto:240 rtt:37.014/3.513 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1254 ssthresh:166 bytes_sent:92179024 bytes_acked:90938089 segs_out:63663 segs_in:2107 data_segs_out:63661 bbr:(bw:389480312bps,mrtt:0.279,pacing_gain:1,cwnd_gain:2) send 392455179bps lastrcv:2992 lastack:4 pacing_rate 385585512bps delivery_rate 335844160bps delivered:62805 busy:2992ms rwnd_limited:8ms(0.3%) unacked:857 rcv_space:14480 rcv_ssthresh:64088 notsent:2905376 minrtt:0.279 snd_wnd:4205568                
0      3798104     10.77.0.1:48170   10.77.0.17:5208
	 bbr wscale:10,10 rto:244 rtt:43.441/8.52 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1358 ssthresh:180 bytes_sent:100576664 bytes_acked:98782593 segs_out:69463 segs_in:2165 data_segs_out:69461 bbr:(bw:449580040bps,mrtt:0.452,pacing_gain:1,cwnd_gain:2) send 362124997bps lastsnd:4 lastrcv:2992 lastack:4 pacing_rate 445084240bps delivery_rate 254886624bps delivered:68223 busy:2992ms rwnd_limited:44ms(1.5%) unacked:1239 rcv_space:14480 rcv_ssthresh:64088 notsent:2004032 minrtt:0.452 snd_wnd:4261888    
0      4173136     10.77.0.1:51928   10.77.0.11:5202
	 bbr wscale:10,10 rto:268 rtt:65.635/12.98 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1672 ssthresh:158 bytes_sent:99578992 bytes_acked:97252057 segs_out:68773 segs_in:2261 data_segs_out:68771 bbr:(bw:411041312bps,mrtt:0.361,pacing_gain:0.75,cwnd_gain:2) send 295093289bps lastsnd:4 lastrcv:3032 lastack:8 pacing_rate 305198176bps delivery_rate 224846896bps delivered:67165 busy:3000ms unacked:1607 rcv_space:14480 rcv_ssthresh:64088 notsent:1846200 minrtt:0.361 snd_wnd:4831232                         
0      3810520     10.77.0.1:36912   10.77.0.10:5201
	 bbr wscale:10,10 rto:260 rtt:59.934/13.101 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1398 ssthresh:168 bytes_sent:107340888 bytes_acked:105976873 segs_out:74134 segs_in:1788 data_segs_out:74132 bbr:(bw:436114688bps,mrtt:0.239,pacing_gain:1,cwnd_gain:2) send 270204425bps lastrcv:2992 lastack:4 pacing_rate 431753536bps delivery_rate 183648120bps delivered:73191 busy:2992ms rwnd_limited:8ms(0.3%) unacked:942 rcv_space:14480 rcv_ssthresh:64088 notsent:2446504 minrtt:0.239 snd_wnd:3031040             
0      2930752     10.77.0.1:34694   10.77.0.15:5206
	 bbr wscale:10,10 rto:240 rtt:39.083/7.045 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1372 ssthresh:148 bytes_sent:102172360 bytes_acked:100185705 segs_out:70564 segs_in:1674 data_segs_out:70562 bbr:(bw:413561496bps,mrtt:0.283,pacing_gain:0.75,cwnd_gain:2) send 406653737bps lastsnd:8 lastrcv:2988 lastack:20 pacing_rate 307069408bps delivery_rate 256590480bps delivered:69191 busy:2988ms unacked:1372 rcv_space:14480 rcv_ssthresh:64088 notsent:944096 minrtt:0.283 snd_wnd:2956288                       
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.10:5201    10.77.0.1:36912
	 skmem:(r0,rb4989024,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.11:5202    10.77.0.1:51928
	 skmem:(r0,rb7279212,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.12:5203    10.77.0.1:56094
	 skmem:(r0,rb8837147,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.13:5204    10.77.0.1:58848
	 skmem:(r0,rb11901069,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.14:5205    10.77.0.1:40806
	 skmem:(r0,rb7522921,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.15:5206    10.77.0.1:34694
	 skmem:(r0,rb4454890,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.16:5207    10.77.0.1:58482
	 skmem:(r0,rb6758348,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.17:5208    10.77.0.1:48170
	 skmem:(r0,rb6842910,t0,tb69120,f0,w0,o0,bl0,d0)
== sample 2
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                         
0      3808976     10.77.0.1:40806   10.77.0.14:5205
	 bbr wscale:10,10 rto:252 rtt:51.471/12.622 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1316 ssthresh:114 bytes_sent:132391384 bytes_acked:130485817 segs_out:91435 segs_in:2494 data_segs_out:91433 bbr:(bw:405892552bps,mrtt:0.53,pacing_gain:1.25,cwnd_gain:2) send 296177343bps lastsnd:4 lastrcv:4044 lastack:8 pacing_rate 502292032bps delivery_rate 244486912bps delivered:90118 busy:4044ms rwnd_limited:24ms(0.6%) unacked:1316 rcv_space:14480 rcv_ssthresh:64088 notsent:1903408 minrtt:0.53 snd_wnd:4713472   
0      4173096     10.77.0.1:58848   10.77.0.13:5204
	 bbr wscale:10,10 rto:244 rtt:41.306/11.261 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1282 ssthresh:150 bytes_sent:134080528 bytes_acked:132700585 segs_out:92605 segs_in:3535 data_segs_out:92603 bbr:(bw:341838560bps,mrtt:0.405,pacing_gain:0.75,cwnd_gain:2) send 359528591bps lastsnd:4 lastrcv:4064 lastack:28 pacing_rate 253815128bps delivery_rate 253798104bps delivered:91651 busy:4056ms rwnd_limited:184ms(4.5%) unacked:953 rcv_space:14480 rcv_ssthresh:64088 notsent:2793152 minrtt:0.405 snd_wnd:7901184
0      4166472     10.77.0.1:56094   10.77.0.12:5203
	 bbr wscale:10,10 rto:252 rtt:49.876/4.756 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1136 ssthresh:152 bytes_sent:140598808 bytes_acked:139162393 segs_out:97102 segs_in:2843 data_segs_out:97100 bbr:(bw:404220944bps,mrtt:0.585,pacing_gain:1,cwnd_gain:2) send 263842810bps lastsnd:4 lastrcv:4072 lastack:4 pacing_rate 400178736bps delivery_rate 195662112bps delivered:96109 busy:4056ms rwnd_limited:4ms(0.1%) unacked:992 rcv_space:14480 rcv_ssthresh:64088 notsent:2730056 minrtt:0.585 snd_wnd:5866496       
0      4186856     10.77.0.1:58482   10.77.0.16:5207
	 bbr wscale:10,10 rto:240 rtt:39.818/5.45 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1144 ssthresh:166 bytes_sent:129434616 bytes_acked:127778105 segs_out:89392 segs_in:2318 data_segs_out:89390 bbr:(bw:391238912bps,mrtt:0.279,pacing_gain:1,cwnd_gain:2) send 332816716bps lastsnd:4 lastrcv:4048 lastack:4 pacing_rate 387326528bps delivery_rate 231413848bps delivered:88247 busy:4048ms rwnd_limited:8ms(0.2%) unacked:1144 rcv_space:14480 rcv_ssthresh:64088 notsent:2530344 minrtt:0.279 snd_wnd:4486144       
0      3391216     10.77.0.1:48170   10.77.0.17:5208
	 bbr wscale:10,10 rto:216 rtt:15.807/6.645 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1324 ssthresh:180 bytes_sent:137074952 bytes_acked:135157801 segs_out:94669 segs_in:2368 data_segs_out:94667 bbr:(bw:1133217120bps,mrtt:0.452,pacing_gain:1,cwnd_gain:2) send 970280003bps lastsnd:12 lastrcv:4048 lastack:12 pacing_rate 1121884944bps delivery_rate 233854752bps delivered:93344 busy:4048ms rwnd_limited:44ms(1.1%) unacked:1324 rcv_space:14480 rcv_ssthresh:64088 notsent:1474064 minrtt:0.452 snd_wnd:4541440 
0      4204992     10.77.0.1:51928   10.77.0.11:5202
	 bbr wscale:10,10 rto:244 rtt:43.627/10.321 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1114 ssthresh:158 bytes_sent:136623176 bytes_acked:135860081 segs_out:94356 segs_in:2483 data_segs_out:94354 bbr:(bw:378131912bps,mrtt:0.361,pacing_gain:1,cwnd_gain:2) send 295793339bps lastsnd:4 lastrcv:4088 lastack:8 pacing_rate 374350592bps delivery_rate 256199048bps delivered:93828 busy:4056ms unacked:527 rcv_space:14480 rcv_ssthresh:64088 notsent:3441896 minrtt:0.361 snd_wnd:4551680                             
0      3809072     10.77.0.1:36912   10.77.0.10:5201
	 bbr wscale:10,10 rto:252 rtt:51.963/12.981 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1258 ssthresh:168 bytes_sent:142133432 bytes_acked:140708601 segs_out:98162 segs_in:1994 data_segs_out:98160 bbr:(bw:410753392bps,mrtt:0.239,pacing_gain:1,cwnd_gain:2) send 280443238bps lastrcv:4048 lastack:4 pacing_rate 406645856bps delivery_rate 214631296bps delivered:97177 busy:4048ms rwnd_limited:8ms(0.2%) unacked:984 rcv_space:14480 rcv_ssthresh:64088 notsent:2384240 minrtt:0.239 snd_wnd:3031040                
0      3798104     10.77.0.1:34694   10.77.0.15:5206
	 bbr wscale:10,10 rto:224 rtt:21.178/7.322 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:924 ssthresh:148 bytes_sent:139986880 bytes_acked:139522073 segs_out:96679 segs_in:2444 data_segs_out:96677 bbr:(bw:388602736bps,mrtt:0.283,pacing_gain:1,cwnd_gain:2) send 505412031bps lastsnd:4 lastrcv:4044 lastack:4 pacing_rate 384716712bps delivery_rate 317794992bps delivered:96357 busy:4044ms unacked:321 rcv_space:14480 rcv_ssthresh:64088 notsent:3333296 minrtt:0.283 snd_wnd:4273152                               
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.10:5201    10.77.0.1:36912
	 skmem:(r0,rb4989024,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.11:5202    10.77.0.1:51928
	 skmem:(r0,rb7279212,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.12:5203    10.77.0.1:56094
	 skmem:(r0,rb8837147,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.13:5204    10.77.0.1:58848
	 skmem:(r0,rb11901069,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.14:5205    10.77.0.1:40806
	 skmem:(r0,rb7522921,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.15:5206    10.77.0.1:34694
	 skmem:(r0,rb6860164,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.16:5207    10.77.0.1:58482
	 skmem:(r0,rb6758348,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.17:5208    10.77.0.1:48170
	 skmem:(r0,rb6842910,t0,tb69120,f0,w0,o0,bl0,d0)
== sample 3
Recv-Q Send-Q  Local Address:Port  Peer Address:PortProcess                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                        
0      3070496     10.77.0.1:40806   10.77.0.14:5205
	 bbr wscale:10,10 rto:244 rtt:41.051/14.882 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1698 ssthresh:114 bytes_sent:174506464 bytes_acked:172470577 segs_out:120520 segs_in:2739 data_segs_out:120518 bbr:(bw:429830120bps,mrtt:0.385,pacing_gain:1.25,cwnd_gain:2) send 479151105bps lastrcv:5120 lastack:8 pacing_rate 531914768bps delivery_rate 243016712bps delivered:119113 busy:5120ms rwnd_limited:24ms(0.5%) unacked:1406 rcv_space:14480 rcv_ssthresh:64088 notsent:1034608 minrtt:0.385 snd_wnd:4713472       
0      4161512     10.77.0.1:58848   10.77.0.13:5204
	 bbr wscale:10,10 rto:232 rtt:31.671/4.627 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1646 ssthresh:150 bytes_sent:174634664 bytes_acked:173567489 segs_out:120612 segs_in:3769 data_segs_out:120610 bbr:(bw:419605784bps,mrtt:0.405,pacing_gain:1,cwnd_gain:2) send 602041742bps lastsnd:4 lastrcv:5140 lastack:12 pacing_rate 415409720bps delivery_rate 410166528bps delivered:119874 busy:5132ms rwnd_limited:184ms(3.6%) unacked:737 rcv_space:14480 rcv_ssthresh:64088 notsent:3094336 minrtt:0.405 snd_wnd:7620608
0      3516320     10.77.0.1:56094   10.77.0.12:5203
	 bbr wscale:10,10 rto:236 rtt:32.209/11.271 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1236 ssthresh:152 bytes_sent:179316880 bytes_acked:177931145 segs_out:123841 segs_in:3079 data_segs_out:123839 bbr:(bw:394886616bps,mrtt:0.304,pacing_gain:1,cwnd_gain:2) send 444528672bps lastsnd:4 lastrcv:5148 lastack:12 pacing_rate 390937752bps delivery_rate 148223088bps delivered:122883 busy:5132ms rwnd_limited:4ms(0.1%) unacked:957 rcv_space:14480 rcv_ssthresh:64088 notsent:2130584 minrtt:0.304 snd_wnd:5866496 
0      4150656     10.77.0.1:58482   10.77.0.16:5207
	 bbr wscale:10,10 rto:248 rtt:45.779/10.521 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1276 ssthresh:166 bytes_sent:166128384 bytes_acked:165150985 segs_out:114733 segs_in:2537 data_segs_out:114731 bbr:(bw:447487944bps,mrtt:0.279,pacing_gain:1,cwnd_gain:2) send 322881321bps lastrcv:5124 lastack:16 pacing_rate 443013064bps delivery_rate 219991736bps delivered:114057 busy:5124ms rwnd_limited:8ms(0.2%) unacked:675 rcv_space:14480 rcv_ssthresh:64088 notsent:3173256 minrtt:0.279 snd_wnd:4370432           
0      4184720     10.77.0.1:48170   10.77.0.17:5208
	 bbr wscale:10,10 rto:272 rtt:68.383/16.289 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1372 ssthresh:180 bytes_sent:173487808 bytes_acked:172613217 segs_out:119816 segs_in:2573 data_segs_out:119814 bbr:(bw:308520400bps,mrtt:0.452,pacing_gain:1,cwnd_gain:2) send 232415191bps lastsnd:4 lastrcv:5124 lastack:4 pacing_rate 305435200bps delivery_rate 166481712bps delivered:119211 busy:5124ms rwnd_limited:44ms(0.9%) unacked:604 rcv_space:14480 rcv_ssthresh:64088 notsent:3310128 minrtt:0.452 snd_wnd:4261888 
0      3730048     10.77.0.1:51928   10.77.0.11:5202
	 bbr wscale:10,10 rto:228 rtt:25.08/7.193 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1750 ssthresh:158 bytes_sent:178706400 bytes_acked:176929705 segs_out:123419 segs_in:2743 data_segs_out:123417 bbr:(bw:399904192bps,mrtt:0.361,pacing_gain:1,cwnd_gain:2) send 808293461bps lastsnd:4 lastrcv:5164 lastack:8 pacing_rate 395905144bps delivery_rate 152687520bps delivered:122191 busy:5132ms unacked:1227 rcv_space:14480 rcv_ssthresh:64088 notsent:1953352 minrtt:0.361 snd_wnd:4831232                          
0      3788800     10.77.0.1:36912   10.77.0.10:5201
	 bbr wscale:10,10 rto:244 rtt:41.382/2.964 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1270 ssthresh:168 bytes_sent:178667920 bytes_acked:177283633 segs_out:123393 segs_in:2213 data_segs_out:123391 bbr:(bw:399447792bps,mrtt:0.239,pacing_gain:1.25,cwnd_gain:2) send 355509159bps lastrcv:5124 pacing_rate 494316648bps delivery_rate 296520744bps delivered:122436 busy:5124ms rwnd_limited:8ms(0.2%) unacked:956 rcv_space:14480 rcv_ssthresh:64088 notsent:2404512 minrtt:0.239 snd_wnd:3031040                    
0      4155760     10.77.0.1:34694   10.77.0.15:5206
	 bbr wscale:10,10 rto:248 rtt:47.83/13.554 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1152 ssthresh:148 bytes_sent:180750976 bytes_acked:179107497 segs_out:124831 segs_in:2699 data_segs_out:124829 bbr:(bw:412707392bps,mrtt:0.283,pacing_gain:1,cwnd_gain:2) send 279004140bps lastrcv:5120 lastack:8 pacing_rate 408580320bps delivery_rate 209228768bps delivered:123695 busy:5120ms unacked:1135 rcv_space:14480 rcv_ssthresh:64088 notsent:2512280 minrtt:0.283 snd_wnd:4553728                                   
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.10:5201    10.77.0.1:36912
	 skmem:(r0,rb4989024,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.11:5202    10.77.0.1:51928
	 skmem:(r0,rb7279212,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.12:5203    10.77.0.1:56094
	 skmem:(r0,rb8837147,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.13:5204    10.77.0.1:58848
	 skmem:(r0,rb11901069,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.14:5205    10.77.0.1:40806
	 skmem:(r0,rb7522921,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.15:5206    10.77.0.1:34694
	 skmem:(r0,rb6860164,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.16:5207    10.77.0.1:58482
	 skmem:(r0,rb6758348,t0,tb69120,f0,w0,o0,bl0,d0)
Recv-Q Send-Q Local Address:Port Peer Address:Port Process
0      0         10.77.0.17:5208    10.77.0.1:48170
	 skmem:(r0,rb6842910,t0,tb69120,f0,w0,o0,bl0,d0)
