/* tests/unit/engine/collector.h - an rp_event_cb that records one request's tokens and its
 * DONE, and a wait for that DONE (the engine tests' shared plumbing). */
#ifndef RP_TESTS_ENGINE_COLLECTOR_H
#define RP_TESTS_ENGINE_COLLECTOR_H

#include <pthread.h>
#include <stdint.h>

#include "engine/engine.h"

#define COLLECTOR_MAX 96

typedef struct collector {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t toks[COLLECTOR_MAX]; /* the first COLLECTOR_MAX tokens */
    int n, done;
    rp_finish finish;
} collector;

/* A fresh collector (as a value: assign it before each submit). */
collector collector_new(void);
/* The callback: user is the collector. */
void collect_cb(const rp_event *ev, void *user);
/* Blocks until the collector's DONE arrived. */
void collector_wait(collector *c);

#endif
