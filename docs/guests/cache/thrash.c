// A cache-hungry neighbour inside this VM: SCHED_IDLE on CPU argv[1], dependent random reads
// over argv[2] MiB of 2 MiB pages, forever (it takes only CPU time nothing else wants, and
// keeps that much of the shared L3 busy).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sched.h>
int main(int c,char**v){
  cpu_set_t s;CPU_ZERO(&s);CPU_SET(atoi(v[1]),&s);sched_setaffinity(0,sizeof s,&s);
  struct sched_param p={0};if(sched_setscheduler(0,SCHED_IDLE,&p)){perror("SCHED_IDLE");return 1;}
  size_t bytes=(size_t)atoi(v[2])<<20,lines=bytes/64;uint64_t x=0x9e3779b97f4a7c15ULL;
  char*m=mmap(0,bytes+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  char*b=(char*)(((uintptr_t)m+(2<<20)-1)&~((uintptr_t)(2<<20)-1));
  madvise(b,bytes,MADV_HUGEPAGE);
  size_t*ord=malloc(lines*sizeof(size_t));
  for(size_t i=0;i<lines;i++)ord[i]=i;
  for(size_t i=lines-1;i>0;i--){x^=x<<13;x^=x>>7;x^=x<<17;size_t j=x%i,t=ord[i];ord[i]=ord[j];ord[j]=t;}
  for(size_t i=0;i<lines;i++)*(size_t*)(b+i*64)=ord[i]*64;
  free(ord);
  volatile size_t at=0;for(;;)at=*(size_t*)(b+at);
}
