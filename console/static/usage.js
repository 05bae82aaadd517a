// Usage charts: uPlot draws each chart from the JSON in its data-chart attribute (the same
// figures as the totals table).
"use strict";
(() => {
  const palette = ["#1f4e8c", "#b35c00", "#14532d", "#8a1c1c", "#5b3c88", "#0f6e6e", "#6b4f1d", "#3b4350"];
  for (const el of document.querySelectorAll(".chart[data-chart]")) {
    const c = JSON.parse(el.dataset.chart);
    const series = [{ label: "Hour (UTC)", value: (u, v) => v == null ? "" : new Date(v * 1000).toISOString().slice(0, 13) + ":00" }];
    const data = [c.x];
    (c.series || []).forEach((s, i) => {
      series.push({ label: s.label, stroke: palette[i % palette.length], width: 2, value: (u, v) => v == null ? "" : v + " " + c.unit });
      data.push(s.values);
    });
    if (data.length === 1) {
      el.textContent = "Nothing to draw in this period.";
      continue;
    }
    const width = Math.max(320, el.clientWidth || 560);
    new uPlot({ width: width, height: 240, series: series, axes: [{}, { label: c.unit, size: 70 }], scales: { x: { time: true } } }, data, el);
  }
})();
