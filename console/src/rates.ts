// A subject's two failure rates as the statistics table shows them: every failed request over
// every request (`error_rate`), and the requests refused for the inputs they carried
// (`invalid_input_rate`, the rollout gate of that name). Pure: tested by `make console-test`.

export interface Rates {
  requests: number;
  error_rate?: number | null;
  invalid_input_rate?: number | null;
}

/** A rate as a percentage: "—" before any request, "0%" when none failed, else 2 significant digits (never rounded to 0). */
export function percent(rate: number | null | undefined): string {
  if (rate == null || !Number.isFinite(rate)) return "—";
  if (rate === 0) return "0%";
  const pct = rate * 100;
  if (pct >= 10) return `${pct.toFixed(0)}%`;
  const shown = Number(pct.toPrecision(2));
  return `${shown}%`;
}

/** The two cells: error rate, then refused-input rate. A subject counted before the
 *  statistics had refused inputs (an older server) shows "—" for the second. */
export function rateCells(t: Rates): [string, string] {
  if (!t.requests) return ["—", "—"];
  return [percent(t.error_rate), percent(t.invalid_input_rate)];
}
