// Maintenance windows as the calendar and the admins' Drain dialog show them. Pure.
import type { Schemas } from '../../api/client'
import { blockPlacement } from './calendar'

export type MaintenanceWindow = Schemas['Maintenance']

/** Whether a window drains this GPU (a whole-host window drains every GPU of the host). */
export function drains(window: MaintenanceWindow, gpu: { host: string; index: number | null | undefined }): boolean {
  if (window.host !== gpu.host) return false
  return window.gpus == null || (gpu.index != null && window.gpus.includes(gpu.index))
}

/** Where each window draining `gpu` sits in `day`'s column (percent), with its reason. An
 *  open-ended window runs to the end of the day. */
export function drainSpans(
  windows: readonly MaintenanceWindow[],
  gpu: { host: string; index: number | null | undefined },
  day: Date,
): { id: number; top: number; height: number; reason: string }[] {
  const out = []
  const dayAfter = new Date(day.getFullYear(), day.getMonth(), day.getDate() + 2)
  for (const w of windows) {
    if (w.status === 'removed' || !drains(w, gpu)) continue
    const p = blockPlacement(new Date(w.start), w.end ? new Date(w.end) : dayAfter, day)
    if (p && p.height > 0) out.push({ id: w.id, top: p.top, height: p.height, reason: w.reason })
  }
  return out
}

/** "dgx1:0,1 drained until further notice: new fan". */
export function windowText(window: MaintenanceWindow, format: (iso: string) => string): string {
  const until = window.end ? format(window.end) : 'further notice'
  return `${window.target} drained from ${format(window.start)} to ${until}: ${window.reason}`
}

/** The Drain dialog's GPUs field: empty or "all" → every GPU (null); "0,1" or "0-3" → indices.
 *  Throws with a message the dialog shows. */
export function parseIndices(text: string): number[] | null {
  const value = text.trim().toLowerCase()
  if (value === '' || value === 'all') return null
  const found = new Set<number>()
  for (const part of value.split(',')) {
    const m = /^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$/.exec(part)
    if (!m) throw new Error(`Not a GPU index: “${part.trim()}” (write 0,1 or 0-3, or leave it empty for all)`)
    const low = Number(m[1])
    const high = m[2] === undefined ? low : Number(m[2])
    if (high < low) throw new Error(`Not a range: “${part.trim()}”`)
    for (let i = low; i <= high; i++) found.add(i)
  }
  return [...found].sort((a, b) => a - b)
}

const OUTCOMES: Record<string, string> = {
  kept: 'kept',
  cancelled: 'cancelled',
  shortened: 'ends when the window starts',
  ended: 'ended now',
  moved: 'moved',
  not_moved: 'kept (no alternative to move it to)',
}

/** What became of the bookings a new window overlapped, in one sentence. */
export function affectedSummary(affected: Schemas['CreatedMaintenance']['affected']): string {
  if (!affected.length) return 'No booking overlaps it.'
  const counts = new Map<string, number>()
  for (const a of affected) counts.set(a.outcome, (counts.get(a.outcome) ?? 0) + 1)
  const parts = [...counts].map(([outcome, n]) => `${n} ${OUTCOMES[outcome] ?? outcome}`)
  const owners = new Set(affected.map((a) => a.owner)).size
  return `${affected.length} booking${affected.length > 1 ? 's overlap' : ' overlaps'} it (${parts.join(', ')}); ${owners} owner${owners > 1 ? 's were' : ' was'} told.`
}
