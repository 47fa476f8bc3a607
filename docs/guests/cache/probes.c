// The cache and memory probes of the revision "2146f2d: the cache this VM is left"
// (../../guest-scaling.md). One chain for all three: dependent random reads, one word per 64-byte
// line, the lines in one random cycle (Sattolo's shuffle, as the bench's own probe builds it:
// `line_cycle` in crates/pvnet/src/bench/machine.rs), so no prefetcher can guess the next line.
//
//   probes fresh TRIALS HUGE MIB   on CPU 0: each trial maps a fresh MIB buffer (2 MiB pages when
//                                  HUGE is 1, else 4 KiB), reads it at random, unmaps it
//   probes cliff CPU PERIOD        on CPU: every PERIOD s, ns per read over 8, 12, 16, 24 and 64 MiB
//                                  of 2 MiB pages, one line each (unix time, the five figures)
//   probes thrash CPU MIB          a neighbour: SCHED_IDLE on CPU, chasing over MIB of 2 MiB
//                                  pages forever (only CPU time nothing else wants)
//
// Build: gcc -O2 -o probes probes.c. No root needed.
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HUGE_PAGE ((size_t)2 << 20)

static uint64_t seed = 0x9e3779b97f4a7c15ULL;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static double thread_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

// A chain over `bytes`, 2 MiB-aligned inside a mapping of `bytes` + 2 MiB (returned in *map for
// munmap), on 2 MiB pages when `huge`, else on 4 KiB pages.
static char *chain(size_t bytes, int huge, char **map) {
    char *p = mmap(0, bytes + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    char *b = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    madvise(b, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    size_t lines = bytes / 64, *ord = malloc(lines * sizeof(size_t));
    for (size_t i = 0; i < lines; i++) ord[i] = i;
    for (size_t i = lines - 1; i > 0; i--) {  // Sattolo: j < i, so one cycle through every line
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        size_t j = seed % i, t = ord[i];
        ord[i] = ord[j];
        ord[j] = t;
    }
    for (size_t i = 0; i < lines; i++) *(size_t *)(b + i * 64) = ord[i] * 64;
    free(ord);
    if (map) *map = p;
    return b;
}

// ns per read over `reads` reads, after `warm` reads not timed.
static double chase(const char *b, size_t warm, size_t reads) {
    size_t at = 0;
    for (size_t i = 0; i < warm; i++) at = *(const size_t *)(b + at);
    double t0 = thread_ns();
    for (size_t i = 0; i < reads; i++) at = *(const size_t *)(b + at);
    double ns = (thread_ns() - t0) / reads;
    if (at == 1) puts("");  // keeps the reads
    return ns;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "fresh")) {
        int trials = atoi(argv[2]), huge = atoi(argv[3]);
        size_t bytes = (size_t)atoi(argv[4]) << 20, reads = 2 << 20;
        pin(0);
        for (int t = 0; t < trials; t++) {
            char *map, *b = chain(bytes, huge, &map);
            printf("%d %s %.1f ns\n", t, huge ? "2M" : "4K", chase(b, reads / 4, reads));
            fflush(stdout);
            munmap(map, bytes + HUGE_PAGE);
        }
    } else if (argc == 4 && !strcmp(argv[1], "cliff")) {
        static const size_t mib[] = {8, 12, 16, 24, 64};
        char *b[5];
        pin(atoi(argv[2]));
        for (int i = 0; i < 5; i++) b[i] = chain(mib[i] << 20, 1, NULL);
        for (;;) {
            printf("%ld", (long)time(NULL));
            for (int i = 0; i < 5; i++) {
                // Below 32 MiB a full pass first, so that the buffer is as cached as it can be.
                size_t small = mib[i] < 32;
                printf(" %.1f", chase(b[i], small ? (mib[i] << 20) / 64 : 0, small ? 400000 : 200000));
            }
            printf("\n");
            fflush(stdout);
            sleep(atoi(argv[3]));
        }
    } else if (argc == 4 && !strcmp(argv[1], "thrash")) {
        struct sched_param p = {0};
        pin(atoi(argv[2]));
        if (sched_setscheduler(0, SCHED_IDLE, &p)) {
            perror("SCHED_IDLE");
            return 1;
        }
        const char *b = chain((size_t)atoi(argv[3]) << 20, 1, NULL);
        volatile size_t at = 0;
        for (;;) at = *(const size_t *)(b + at);
    } else {
        fprintf(stderr, "usage: probes fresh TRIALS HUGE MIB | cliff CPU PERIOD | thrash CPU MIB\n");
        return 2;
    }
}
