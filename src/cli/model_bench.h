/* cli/model_bench.h - in-process model benchmark (`rapid bench --model DIR`).
 *
 * Times prefill and decode through the engine's model API and reports the bandwidth-
 * normalised decode figure: tok/s x bytes read per token / measured read bandwidth, with the
 * bandwidth measured in the same run by the backend's probe.
 */
#ifndef RP_CLI_MODEL_BENCH_H
#define RP_CLI_MODEL_BENCH_H

int rp_model_bench_main(int argc, char **argv);

#endif
