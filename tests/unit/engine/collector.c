/* tests/unit/engine/collector.c - see collector.h. */
#include "collector.h"

collector collector_new(void)
{
    return (collector){.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
}

void collect_cb(const rp_event *ev, void *user)
{
    collector *c = user;
    pthread_mutex_lock(&c->mu);
    if (ev->kind == RP_EV_TOKEN && c->n < COLLECTOR_MAX) c->toks[c->n++] = ev->token;
    if (ev->kind == RP_EV_DONE) {
        c->done = 1;
        c->finish = ev->finish;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

void collector_wait(collector *c)
{
    pthread_mutex_lock(&c->mu);
    while (!c->done)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}
