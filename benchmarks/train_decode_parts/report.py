"""The tables benchmarks/train_decode.py prints from one CPU's entry of its JSON, for every part the entry holds."""

from __future__ import annotations

from ctranslate2_decode import report as report_ctranslate2


def report(label: str, run: dict) -> None:
    print(f"\n{label}; load average {run['machine']['load_average_at_start']}")
    for part in run.get("train", {}).values():
        print(f"\ntraining {part['model']}\n{'system':<36} {'target tok/s':>12} {'vs fairseq':>10} {'MFU':>6}")
        for system, rate in part["target_tokens_per_s"].items():
            print(
                f"{system:<36} {rate:12.1f} {part['vs_fairseq_fp32'][system]:9.2f}x "
                f"{part['model_flop_utilisation'][system]:6.1%}"
            )
    for name, part in run.get("gemm_bound", {}).items():
        print(f"{name}: its GEMMs alone run {part['bf16_over_fp32']:.2f}x faster in bf16 than in fp32")
    for name, part in run.get("where_time_goes", {}).items():
        print(
            f"{name}: 1-thread CPU s/update fp32 {part['fp32']['cpu_seconds_per_update']:.3f} "
            f"(GEMMs {part['fp32']['gemm_share']:.0%}), bf16 {part['bf16']['cpu_seconds_per_update']:.3f} "
            f"(GEMMs {part['bf16']['gemm_share']:.0%}): bf16 {part['bf16_over_fp32']:.2f}x; ceiling with only "
            f"the GEMMs gaining {part['ceiling_if_only_gemms_gain']:.2f}x"
        )
    for measured in run.get("train_precisions", {}).values():
        for part in measured["repeats"]:
            print(f"\ntrainer update, {part['model']}, 1 thread, {part['rounds']} paired rounds ({part['date']})")
            for label, seconds in part["cpu_seconds_per_update"].items():
                ratio = part["speedup_over_fp32_per_round"].get(label)
                versus = f"  {ratio['median']:.2f}x fp32 [{ratio['q1']:.2f}, {ratio['q3']:.2f}]" if ratio else ""
                print(f"{label:<14} CPU s/update median {seconds['median']:.3f}, fastest {seconds['min']:.3f}{versus}")
            pair = part["bf16_weights_over_bf16_per_round"]
            print(f"bf16-weights {pair['median']:.2f}x bf16 autocast per round [{pair['q1']:.2f}, {pair['q3']:.2f}]")
    for repeats in run.get("train_shapes", {}).values():
        for part in repeats:
            print(f"\ntrainer update, {part['model']}, 1 thread, {part['rounds']} paired rounds ({part['date']})")
            for label in ("fp32", "bf16"):
                if label in part:
                    rates, pads = part[label]["target_tokens_per_cpu_s"], part[label]["padding_share"]
                    print(
                        f"{label:<5} target tokens per CPU s: "
                        + ", ".join(f"{b} {rates[b]:.0f} ({pads[b]:.1%} padding)" for b in rates)
                        + f"; fixed/fairseq {part[label]['fixed_over_fairseq']:.3f}"
                    )
    paired_variants = {  # part → how a variant's rate and the part's ratio read
        "train_loss": ("{} loss", "chunked/reference", "chunked_over_reference"),
        "train_compile": ("{}", "compiled/eager", "compiled_over_eager"),
    }
    for key, (variant_name, ratio_name, ratio_key) in paired_variants.items():
        for repeats in run.get(key, {}).values():
            for part in repeats:
                print(f"\ntrainer update, {part['model']}, 1 thread, {part['rounds']} paired rounds ({part['date']})")
                for label in ("fp32", "bf16"):
                    if label in part:
                        rates, measured = part[label]["target_tokens_per_cpu_s"], part[label]
                        compiling = measured.get("first_compiled_update_s")
                        print(
                            f"{label:<5} target tokens per CPU s: "
                            + ", ".join(f"{variant_name.format(v)} {rate:.0f}" for v, rate in rates.items())
                            + f"; {ratio_name} {measured[ratio_key]:.3f}"
                            + (f" (compiling: {compiling:.0f} s)" if compiling is not None else "")
                        )
    if "ctranslate2" in run:
        report_ctranslate2(run["ctranslate2"])
    for name, part in run.get("decode", {}).items():
        print(
            f"\ndecoding {name}, beam 5\n{'system':<28} {'whole-process s':>15} {'vs fairseq':>10} "
            f"{'own sent/s':>10} {'same hyps':>9}"
        )
        for system, seconds in part["whole_process_seconds"].items():
            same = part["hypotheses_identical_to_fairseq"].get(system, part["sentences"])
            print(
                f"{system:<28} {seconds:15.2f} {part['whole_process_vs_fairseq_fp32'][system]:9.2f}x "
                f"{part['decoding_sentences_per_s_own_timer'][system]:10.1f} {same:>5}/{part['sentences']}"
            )
        for system, r in part.get("whole_process_vs_fairseq_fp32_per_turn", {}).items():
            if system.startswith("lwnmt"):
                print(
                    f"{system}: {r['median']:.2f}x fairseq-generate per turn (median) [{r['min']:.2f}, {r['max']:.2f}]"
                )
        for label, u in part.get("model_flop_utilisation", {}).items():
            print(
                f"{label}: {u['matmul_gflop']:.0f} GFLOP of matrix products; at {u['matmul_fraction_of_peak']:.0%} "
                f"of this CPU's {label} peak while they run, {u['decode_fraction_of_peak']:.0%} over the decode"
            )
