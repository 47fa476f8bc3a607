#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <sched.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
// pointer chase over `size` bytes, one pointer per 64-byte line, random permutation.
// mode 0: 4K pages (MADV_NOHUGEPAGE); 1: THP (MADV_HUGEPAGE); stride: lines per page touched
double run(size_t size,int huge,int perpage){
  size_t align=2<<20; char*raw=mmap(0,size+align,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  char*b=(char*)(((uintptr_t)raw+align-1)&~(align-1));
  madvise(b,size,huge?MADV_HUGEPAGE:MADV_NOHUGEPAGE);
  memset(b,1,size);
  size_t n=size/64; size_t*idx=malloc(n*sizeof(size_t));
  size_t m=0;
  if(perpage){ for(size_t p=0;p<size/4096;p++) idx[m++]=p*64+ (p*7%64); } // one line per 4K page
  else { for(size_t i=0;i<n;i++) idx[m++]=i; }
  srand(1); for(size_t i=m-1;i>0;i--){size_t j=rand()%(i+1);size_t t=idx[i];idx[i]=idx[j];idx[j]=t;}
  for(size_t i=0;i<m;i++) *(char**)(b+idx[i]*64)=b+idx[(i+1)%m]*64;
  char*p=b+idx[0]*64; size_t iters=4000000;
  for(size_t i=0;i<iters/4;i++) p=*(char**)p;
  double t0=now(); for(size_t i=0;i<iters;i++) p=*(char**)p; double t=now()-t0;
  if(!p) puts("x");
  munmap(raw,size+align); free(idx); return t/iters*1e9;
}
int main(){ cpu_set_t s;CPU_ZERO(&s);CPU_SET(0,&s);sched_setaffinity(0,sizeof s,&s);
  size_t sz[]={2<<20,3<<20,4<<20,6<<20};
  for(int k=0;k<4;k++){ printf("%3zu MiB: 4K lines %.1f ns, THP lines %.1f ns | one line/page: 4K %.1f ns, THP %.1f ns\n",sz[k]>>20,run(sz[k],0,0),run(sz[k],1,0),run(sz[k],0,1),run(sz[k],1,1)); }
  FILE*f=fopen("/proc/self/smaps_rollup","r"); char l[256]; while(fgets(l,256,f)) if(strstr(l,"AnonHuge")) fputs(l,stdout);
}
