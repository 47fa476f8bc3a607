#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <sched.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
double run(size_t size){
  char*b=mmap(0,size,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  size_t n=size/64; size_t*idx=malloc(n*sizeof(size_t));
  for(size_t i=0;i<n;i++) idx[i]=i;
  srand(1); for(size_t i=n-1;i>0;i--){size_t j=rand()%(i+1);size_t t=idx[i];idx[i]=idx[j];idx[j]=t;}
  for(size_t i=0;i<n;i++) *(char**)(b+idx[i]*64)=b+idx[(i+1)%n]*64;
  char*p=b+idx[0]*64; size_t iters=2000000;
  for(size_t i=0;i<n;i++) p=*(char**)p;
  double t0=now(); for(size_t i=0;i<iters;i++) p=*(char**)p; double t=now()-t0;
  if(!p) puts("x");
  munmap(b,size); free(idx); return t/iters*1e9;
}
int main(int c,char**v){ int cpu=c>1?atoi(v[1]):0; cpu_set_t s;CPU_ZERO(&s);CPU_SET(cpu,&s);sched_setaffinity(0,sizeof s,&s);
  double sz[]={1,2,3,4,5,6,8,10,12,16,24,64};
  printf("cpu%d",cpu); for(int k=0;k<12;k++){ printf(" %g:%.0f",sz[k],run((size_t)(sz[k]*(1<<20)))); } puts("");
}
