// How a GPU's state reads on the dashboard: short texts shared by the card and the row.
import { DASH, mib, watts, when, timeOfDay } from '../../format'
import type { GpuView, Proc } from './fleet'

export function shortModel(name: string | null): string {
  return name ? name.replace(/^NVIDIA\s+/i, '') : DASH
}

/** "17.4 / 80.0 GiB" (one unit, said once: it fits a card of 8 to a row), "4 MiB / 80.0 GiB". */
export function memoryText(gpu: Pick<GpuView, 'memory_used_mib' | 'memory_total_mib'>): string {
  if (gpu.memory_used_mib == null && gpu.memory_total_mib == null) return DASH
  const used = mib(gpu.memory_used_mib)
  const total = mib(gpu.memory_total_mib)
  const unit = / (GiB|MiB)$/
  const [u, t] = [unit.exec(used)?.[1], unit.exec(total)?.[1]]
  return u && u === t ? `${used.replace(unit, '')} / ${total}` : `${used} / ${total}`
}

/** "148 / 400 W", or "148 W" when the limit is not reported. */
export function powerText(draw: number | null, limit: number | null): string {
  if (limit == null) return watts(draw)
  return `${draw == null ? DASH : Math.round(draw)} / ${watts(limit)}`
}

/** 0..100 for a bar, or null */
export function share(used: number | null, total: number | null): number | null {
  if (used == null || total == null || total <= 0) return null
  return Math.max(0, Math.min(100, (used / total) * 100))
}

export function clampPercent(value: number | null): number {
  return value == null ? 0 : Math.max(0, Math.min(100, value))
}

/** The users of the processes, each once, in order of appearance ("unknown" for null). */
export function processUsers(processes: readonly Proc[]): string[] {
  const seen = new Set<string>()
  for (const p of processes) seen.add(p.user ?? 'unknown')
  return [...seen]
}

export function level(value: number | null, warn: number, danger: number): '' | 'warn' | 'danger' {
  if (value == null) return ''
  if (value >= danger) return 'danger'
  if (value >= warn) return 'warn'
  return ''
}

export function untilText(iso: string): string {
  return `until ${when(iso)}`
}

export function commandShort(command: string, max = 48): string {
  return command.length > max ? `${command.slice(0, max - 1)}…` : command
}

/** "14:05:09" today, else as `when` ("Tue 14:05"). */
export function clock(iso: string | null | undefined, now: Date = new Date()): string {
  if (!iso) return DASH
  const t = new Date(iso)
  if (t.toDateString() !== now.toDateString()) return when(iso, now)
  return timeOfDay(t, true)
}

export const GPU_STATUS_TEXT: Record<string, string> = {
  no_gpu: 'No GPU found on this host',
  no_nvidia_smi: 'nvidia-smi is missing on this host',
  error: 'nvidia-smi fails on this host',
}
