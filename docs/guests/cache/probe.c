// Random dependent reads over fresh 64 MiB allocations: does the latency differ from one
// allocation (one set of guest-physical pages) to the next?  argv: trials hugepage(0/1) MiB
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <sched.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int c,char**v){
  int trials=atoi(v[1]),huge=atoi(v[2]);size_t mib=c>3?atoi(v[3]):64;
  cpu_set_t s;CPU_ZERO(&s);CPU_SET(0,&s);sched_setaffinity(0,sizeof s,&s);
  size_t bytes=mib<<20,lines=bytes/64;
  uint64_t x=0x9e3779b97f4a7c15ULL;
  for(int t=0;t<trials;t++){
    char*p=mmap(0,bytes+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
    char*b=(char*)(((uintptr_t)p+(2<<20)-1)&~((uintptr_t)(2<<20)-1));
    madvise(b,bytes,huge?MADV_HUGEPAGE:MADV_NOHUGEPAGE);
    size_t*ord=malloc(lines*sizeof(size_t));
    for(size_t i=0;i<lines;i++)ord[i]=i;
    for(size_t i=lines-1;i>0;i--){x^=x<<13;x^=x>>7;x^=x<<17;size_t j=x%i,tmp=ord[i];ord[i]=ord[j];ord[j]=tmp;}
    for(size_t i=0;i<lines;i++)*(size_t*)(b+i*64)=ord[i]*64;
    free(ord);
    size_t at=0;int n=2<<20;
    for(int i=0;i<n/4;i++)at=*(size_t*)(b+at);
    double t0=now();
    for(int i=0;i<n;i++)at=*(size_t*)(b+at);
    double ns=(now()-t0)/n;
    printf("%d %s %.1f ns %zu\n",t,huge?"2M":"4K",ns,at&1);
    fflush(stdout);
    munmap(p,bytes+(2<<20));
  }
}
