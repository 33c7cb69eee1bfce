// uPlot and its stylesheet, loaded on first use only (kept out of the initial bundle).
import type uPlot from 'uplot'

let pending: Promise<typeof uPlot> | null = null

export function loadUPlot(): Promise<typeof uPlot> {
  pending ??= Promise.all([import('uplot'), import('uplot/dist/uPlot.min.css')]).then(([mod]) => mod.default)
  pending.catch(() => (pending = null))
  return pending
}
