package window

// workloadConfigs returns the configurations BenchmarkWorkload compares: the worker's default
// window with auto sizing (DEDUP_WINDOW_CAPACITY=auto), with main's fixed default of 1M, and
// with the capacity set by hand to the load (150k per partition).
func workloadConfigs() map[string]Config {
	auto, hand := workloadDefault(), workloadDefault()
	auto.Capacity, auto.Auto = 0, true
	hand.Capacity = 150_000
	return map[string]Config{"auto": auto, "fixed-1M": workloadDefault(), "fixed-150k": hand}
}
