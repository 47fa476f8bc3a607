// Every PERIOD s, on CPU argv[1]: ns per dependent random read over 8, 12, 16 and 24 MiB of
// 2 MiB guest pages (the L3 this VM gets from its neighbours), and 64 MiB (memory). One line each.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>
static double cpu_ns(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e9+t.tv_nsec;}
static uint64_t x=0x9e3779b97f4a7c15ULL;
static char*chain(size_t bytes){
  char*p=mmap(0,bytes+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  char*b=(char*)(((uintptr_t)p+(2<<20)-1)&~((uintptr_t)(2<<20)-1));
  madvise(b,bytes,MADV_HUGEPAGE);
  size_t lines=bytes/64,*ord=malloc(lines*sizeof(size_t));
  for(size_t i=0;i<lines;i++)ord[i]=i;
  for(size_t i=lines-1;i>0;i--){x^=x<<13;x^=x>>7;x^=x<<17;size_t j=x%i,t=ord[i];ord[i]=ord[j];ord[j]=t;}
  for(size_t i=0;i<lines;i++)*(size_t*)(b+i*64)=ord[i]*64;
  free(ord);return b;
}
static double run(char*b,int n,size_t lines){size_t at=0;for(size_t i=0;i<lines;i++)at=*(size_t*)(b+at);
  double t0=cpu_ns();for(int i=0;i<n;i++)at=*(size_t*)(b+at);double r=(cpu_ns()-t0)/n;
  if(at==1)puts("");return r;}
int main(int c,char**v){
  cpu_set_t s;CPU_ZERO(&s);CPU_SET(atoi(v[1]),&s);sched_setaffinity(0,sizeof s,&s);
  int period=c>2?atoi(v[2]):10;
  size_t mib[]={8,12,16,24,64};char*b[5];
  for(int i=0;i<5;i++)b[i]=chain(mib[i]<<20);
  for(;;){struct timespec w;clock_gettime(CLOCK_REALTIME,&w);
    printf("%ld",(long)w.tv_sec);
    for(int i=0;i<5;i++)printf(" %.1f",run(b[i],mib[i]<32?400000:200000,mib[i]<32?(mib[i]<<20)/64:0));
    printf("\n");fflush(stdout);sleep(period);}
}
