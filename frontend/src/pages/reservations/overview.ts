// Pure logic of the long-term overview grid: runs → cell states, the row layout, hit testing,
// header ticks and the per-GPU list of reserved spans read by screen readers.
import { dateTime, timeOfDay } from '../../format'
import { addDays, gpuLabel, startOfDay } from './calendar'

export interface Run {
  first: number
  count: number
  state: string // free, mine, taken, not_allowed
  owner?: string | null
  reservation_id?: number | null
}

export type CellState = 'free' | 'mine' | 'others' | 'blocked'

export interface GridGpu {
  uuid: string
  host: string
  index: number | null
  name?: string | null
  runs: Run[]
}

export type Row = { kind: 'host'; host: string; top: number } | { kind: 'gpu'; gpu: GridGpu; top: number }

export const ROW_HEIGHT = 24
export const HOST_ROW_HEIGHT = 26
export const WEEK_CHOICES = [1, 2, 4, 8] as const

/** A GPU of an overview answer: full (`runs`) or compact (`cells` over the answer's `labels`). */
export interface AnswerGpu {
  runs?: readonly Run[]
  cells?: readonly number[]
}

/**
 * A GPU's runs from either answer format. `format=compact` gives each GPU's runs as flat
 * `cells` [label, count, label, count, ...] (the first run starts at slot 0) and the answer one
 * `labels` table of [state, owner, reservation_id]: the same content as full runs, far smaller.
 */
export function gpuRuns(gpu: AnswerGpu, labels: readonly (readonly unknown[])[] | undefined): Run[] {
  if (!gpu.cells) return (gpu.runs ?? []) as Run[]
  const runs: Run[] = []
  let first = 0
  for (let i = 0; i + 1 < gpu.cells.length; i += 2) {
    const label = labels?.[gpu.cells[i]!] ?? ['free', null, null]
    const count = gpu.cells[i + 1]!
    runs.push({
      first,
      count,
      state: String(label[0]),
      owner: (label[1] as string | null | undefined) ?? null,
      reservation_id: (label[2] as number | null | undefined) ?? null,
    })
    first += count
  }
  return runs
}

/** The state a cell is drawn in. */
export function cellState(state: string | undefined): CellState {
  switch (state) {
    case 'mine':
      return 'mine'
    case 'taken':
      return 'others'
    case 'not_allowed':
      return 'blocked'
    default:
      return 'free'
  }
}

export const STATE_LABEL: Record<CellState, string> = {
  free: 'free',
  mine: 'mine',
  others: 'reserved by others',
  blocked: 'not allowed',
}

/** The run holding slot `slot` (runs sorted by `first`), or null. */
export function runAt(runs: Run[], slot: number): Run | null {
  let lo = 0
  let hi = runs.length - 1
  while (lo <= hi) {
    const mid = (lo + hi) >> 1
    const run = runs[mid]!
    if (slot < run.first) hi = mid - 1
    else if (slot >= run.first + run.count) lo = mid + 1
    else return run
  }
  return null
}

/** The grid's range: from local midnight today, `weeks` weeks long. */
export function overviewRange(now: Date, weeks: number): { start: Date; end: Date } {
  const start = startOfDay(now)
  return { start, end: addDays(start, weeks * 7) }
}

/** Host heading rows followed by their GPU rows, with their y offsets. */
export function layoutRows(hosts: { host: string; gpus: GridGpu[] }[]): { rows: Row[]; height: number } {
  const rows: Row[] = []
  let y = 0
  for (const host of hosts) {
    rows.push({ kind: 'host', host: host.host, top: y })
    y += HOST_ROW_HEIGHT
    for (const gpu of host.gpus) {
      rows.push({ kind: 'gpu', gpu, top: y })
      y += ROW_HEIGHT
    }
  }
  return { rows, height: y }
}

/** The row at content y (0 = first row's top), by binary search; null outside. */
export function rowAt(rows: Row[], y: number): Row | null {
  let lo = 0
  let hi = rows.length - 1
  let found: Row | null = null
  while (lo <= hi) {
    const mid = (lo + hi) >> 1
    if (rows[mid]!.top <= y) {
      found = rows[mid]!
      lo = mid + 1
    } else hi = mid - 1
  }
  if (!found) return null
  const h = found.kind === 'host' ? HOST_ROW_HEIGHT : ROW_HEIGHT
  return y < found.top + h ? found : null
}

/** The slot at content x for cells `cellWidth` wide; null outside 0..slots. */
export function slotAt(x: number, cellWidth: number, slots: number): number | null {
  if (x < 0 || cellWidth <= 0) return null
  const slot = Math.floor(x / cellWidth)
  return slot < slots ? slot : null
}

/** How wide a cell is: fill `available` px, but never narrower than `min` (then it scrolls). */
export function cellWidthFor(available: number, slots: number, slotMinutes: number): number {
  const min = slotMinutes === 30 ? 2 : 3
  if (slots <= 0) return min
  return Math.max(min, available / slots)
}

/** The start of slot `slot`. */
export function slotTime(gridStart: Date, slotMinutes: number, slot: number): Date {
  return new Date(gridStart.getTime() + slot * slotMinutes * 60_000)
}

/** Header ticks: each local midnight (a day label) and each hour step that fits (hour labels). */
export function headerTicks(
  gridStart: Date,
  slotMinutes: number,
  slots: number,
  cellWidth: number,
): { days: { slot: number; date: Date }[]; hours: { slot: number; hour: number }[]; hourStep: number } {
  const days: { slot: number; date: Date }[] = []
  const hours: { slot: number; hour: number }[] = []
  const pxPerHour = cellWidth * (60 / slotMinutes)
  const hourStep = [1, 2, 3, 6, 12, 24].find((h) => h * pxPerHour >= 28) ?? 24
  for (let slot = 0; slot < slots; slot++) {
    const t = slotTime(gridStart, slotMinutes, slot)
    if (t.getMinutes() !== 0) continue
    const h = t.getHours()
    if (h === 0) days.push({ slot, date: t })
    if (h % hourStep === 0 && hourStep < 24) hours.push({ slot, hour: h })
  }
  return { days, hours, hourStep }
}

/** Reservations by GPU uuid, for naming runs (the overview omits the ids of one's own). */
export interface Known {
  id: number
  title: string
  owner: string
  start: Date
  end: Date
}
export type KnownIndex = Map<string, Known[]>

export function indexReservations(
  list: { id: number; title: string; owner: string; start: string; end: string; gpus: { uuid: string }[] }[],
): KnownIndex {
  const index: KnownIndex = new Map()
  for (const r of list) {
    const item = { id: r.id, title: r.title, owner: r.owner, start: new Date(r.start), end: new Date(r.end) }
    for (const g of r.gpus) {
      if (!index.has(g.uuid)) index.set(g.uuid, [])
      index.get(g.uuid)!.push(item)
    }
  }
  return index
}

/** The reservation a run shows: by its id, else the one overlapping it on that GPU. */
export function findKnown(index: KnownIndex, uuid: string, id: number | null | undefined, start: Date, end: Date): Known | null {
  const list = index.get(uuid) ?? []
  if (id != null) return list.find((k) => k.id === id) ?? null
  return list.find((k) => k.start < end && start < k.end) ?? null
}

export interface Span {
  state: 'mine' | 'others'
  start: Date
  end: Date
  owner: string | null
  reservationId: number | null
  title: string | null
}

/** A GPU's reserved runs as time spans, with titles where `titles` knows the reservation. */
export function reservedSpans(
  gpu: GridGpu,
  gridStart: Date,
  slotMinutes: number,
  known: KnownIndex = new Map(),
): Span[] {
  const out: Span[] = []
  for (const run of gpu.runs) {
    const state = cellState(run.state)
    if (state !== 'mine' && state !== 'others') continue
    const id = run.reservation_id ?? null
    const start = slotTime(gridStart, slotMinutes, run.first)
    const end = slotTime(gridStart, slotMinutes, run.first + run.count)
    const last = out[out.length - 1]
    if (last && id != null && last.reservationId === id && last.end.getTime() === start.getTime()) {
      last.end = end
      continue
    }
    // A run without an id may cover back-to-back bookings of one owner: one span each.
    const several = id == null ? overlapping(known, gpu.uuid, start, end) : []
    if (several.length > 1) {
      for (const k of several) {
        const from = new Date(Math.max(k.start.getTime(), start.getTime()))
        const to = new Date(Math.min(k.end.getTime(), end.getTime()))
        out.push({ state, start: from, end: to, owner: run.owner ?? k.owner, reservationId: k.id, title: k.title })
      }
      continue
    }
    const k = findKnown(known, gpu.uuid, id, start, end)
    out.push({ state, start, end, owner: run.owner ?? k?.owner ?? null, reservationId: id ?? k?.id ?? null, title: k?.title ?? null })
  }
  return out
}

/** The known reservations on a GPU that overlap [start, end), earliest first. */
function overlapping(index: KnownIndex, uuid: string, start: Date, end: Date): Known[] {
  return (index.get(uuid) ?? []).filter((k) => k.start < end && start < k.end).sort((a, b) => a.start.getTime() - b.start.getTime())
}

/** "mine: Training 21 Nov 09:00–11:00" for the hidden list. */
export function spanText(span: Span): string {
  const fmt = (d: Date) => dateTime(d, false)
  const who = span.state === 'mine' ? 'mine' : `${span.owner ?? 'others'}`
  const title = span.title ?? (span.reservationId != null ? `reservation ${span.reservationId}` : 'reserved')
  return `${who}: ${title} ${fmt(span.start)}–${fmt(span.end)}`
}

/** The tooltip for a cell. */
export function cellDescription(
  gpu: GridGpu,
  run: Run | null,
  time: Date,
  slotMinutes: number,
  known: KnownIndex,
): string {
  const state = cellState(run?.state)
  const end = new Date(time.getTime() + slotMinutes * 60_000)
  const endText = timeOfDay(end)
  let text = `${gpuLabel(gpu)} · ${dateTime(time, false)}–${endText} · ${STATE_LABEL[state]}`
  if ((state === 'mine' || state === 'others') && run) {
    const k = findKnown(known, gpu.uuid, run.reservation_id, time, end)
    if (k) text += ` · “${k.title}”`
    const owner = run.owner ?? k?.owner
    if (owner) text += ` · ${owner}`
  }
  return text
}
