// Small pure helpers of the admin pages.
import type { Schemas } from '../../api/client'

/** Which groups to join and which to leave to go from `before` to `after`. */
export function membershipChanges(before: readonly string[], after: readonly string[]): { add: string[]; remove: string[] } {
  const was = new Set(before)
  const will = new Set(after)
  return { add: [...will].filter((g) => !was.has(g)).sort(), remove: [...was].filter((g) => !will.has(g)).sort() }
}

/** "4 × NVIDIA A100-SXM4-80GB", "2 × A, 1 × B". */
export function gpuModels(gpus: readonly { name: string | null }[]): string {
  const counts = new Map<string, number>()
  for (const g of gpus) counts.set(g.name ?? 'unknown', (counts.get(g.name ?? 'unknown') ?? 0) + 1)
  return [...counts].map(([name, n]) => `${n} × ${name}`).join(', ')
}

export type HostState = Schemas['HostState']

/** A host's reachability as a badge: tone and words. */
export function hostStatus(h: Pick<HostState, 'reachable' | 'gpu_status'>): { tone: 'ok' | 'warn' | 'danger' | 'muted'; text: string } {
  if (h.reachable == null) return { tone: 'muted', text: 'not polled yet' }
  if (!h.reachable) return { tone: 'danger', text: 'unreachable' }
  if (h.gpu_status && h.gpu_status !== 'ok') return { tone: 'warn', text: h.gpu_status.replace(/_/g, ' ') }
  return { tone: 'ok', text: 'reachable' }
}

/** Apply a host.sampled / host.unreachable / host.recovered event to the host it names. */
export function applyHostEvent(host: HostState, type: string, data: Record<string, unknown>): HostState {
  const next = { ...host }
  if (type === 'host.sampled') {
    for (const key of ['sampled_at', 'cpu_percent', 'load_1m', 'load_5m', 'load_15m', 'memory_used_mib', 'memory_total_mib', 'gpu_status', 'gpu_error'] as const) {
      if (key in data) (next as Record<string, unknown>)[key] = data[key]
    }
    next.reachable = true
    next.last_seen = (data.sampled_at as string) ?? next.last_seen
    next.down_since = null
    next.down_reason = null
  } else if (type === 'host.unreachable') {
    next.reachable = false
    next.down_since = (data.since as string) ?? next.down_since
    next.down_reason = (data.reason as string) ?? next.down_reason
  } else if (type === 'host.recovered') {
    next.reachable = true
    next.down_since = null
    next.down_reason = null
  }
  return next
}
