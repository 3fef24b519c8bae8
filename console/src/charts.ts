// Live statistics as time series: the stats route gives counters since the revision began;
// the console samples them while the page is open and charts the rates and latencies.
import uPlot from "uplot";
import { h } from "./dom";

export interface Sample {
  t: number; // seconds
  subjects: Record<string, { requests: number; errors: number; p95: number | null; p50: number | null }>;
}

const COLORS = ["#3f51b5", "#e65100", "#2e7d32", "#ad1457", "#00838f", "#6d4c41", "#5e35b1", "#9e9d24"];

export class LiveCharts {
  readonly element: HTMLElement;
  private samples: Sample[] = [];
  private plots: uPlot[] = [];
  private subjects: string[] = [];
  windowS = 0; // 0: since the page opened
  private last = Date.now() / 1000;

  constructor() {
    this.element = h("div", { class: "charts", id: "charts" });
  }

  add(sample: Sample): void {
    this.samples.push(sample);
    this.last = sample.t;
    const keep = sample.t - 3600;
    while (this.samples.length && this.samples[0].t < keep) this.samples.shift();
    this.draw();
  }

  reset(): void {
    this.samples = [];
    this.draw();
  }

  private series(): { x: number[]; rates: (number | null)[][]; errors: (number | null)[][]; p95: (number | null)[][] } {
    const from = this.windowS ? (this.samples.at(-1)?.t ?? 0) - this.windowS : 0;
    const shown = this.samples.filter((x) => x.t >= from);
    const x: number[] = [];
    const rates = this.subjects.map(() => [] as (number | null)[]);
    const errors = this.subjects.map(() => [] as (number | null)[]);
    const p95 = this.subjects.map(() => [] as (number | null)[]);
    for (let i = 1; i < shown.length; i++) {
      const prev = shown[i - 1];
      const cur = shown[i];
      const dt = cur.t - prev.t || 1;
      x.push(cur.t);
      this.subjects.forEach((name, k) => {
        const a = prev.subjects[name];
        const b = cur.subjects[name];
        rates[k].push(b ? Math.max(0, (b.requests - (a?.requests ?? 0)) / dt) : null);
        errors[k].push(b ? Math.max(0, (b.errors - (a?.errors ?? 0)) / dt) : null);
        p95[k].push(b ? b.p95 : null);
      });
    }
    return { x, rates, errors, p95 };
  }

  private draw(): void {
    const names = [...new Set(this.samples.flatMap((x) => Object.keys(x.subjects)))].sort();
    if (names.join("\u0000") !== this.subjects.join("\u0000")) {
      this.subjects = names;
      for (const p of this.plots) p.destroy();
      this.plots = [];
      this.element.replaceChildren();
    }
    const data = this.series();
    if (!this.plots.length) {
      if (!this.subjects.length) return;
      const width = Math.max(320, Math.min(560, (this.element.clientWidth || 1100) / 3 - 16));
      const make = (title: string, unit: string) => {
        const box = h("figure", { class: "chart" });
        this.element.appendChild(box);
        return new uPlot(
          {
            title,
            width,
            height: 200,
            scales: { x: { time: true, range: (): uPlot.Range.MinMax => [this.windowS ? this.last - this.windowS : Math.min(this.samples[0]?.t ?? this.last, this.last - 30), this.last] } },
            axes: [{}, { label: unit, size: 60 }],
            series: [{}, ...this.subjects.map((name, k) => ({ label: name, stroke: COLORS[k % COLORS.length], width: 2, spanGaps: true }))],
            legend: { live: false },
          },
          [[], ...this.subjects.map(() => [])] as uPlot.AlignedData,
          box,
        );
      };
      this.plots = [make("Requests per second", "req/s"), make("Errors per second", "err/s"), make("p95 latency", "ms")];
    }
    const [rates, errors, p95] = this.plots;
    rates.setData([data.x, ...data.rates] as uPlot.AlignedData);
    errors.setData([data.x, ...data.errors] as uPlot.AlignedData);
    p95.setData([data.x, ...data.p95] as uPlot.AlignedData);
  }
}
