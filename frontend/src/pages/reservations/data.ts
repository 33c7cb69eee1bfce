// Loading what the reservation pages share: the GPU list and the reservations of a range.
import { api, unwrap, type Schemas } from '../../api/client'
import { fetchAllPages } from '../../paging'
import { session } from '../../session'
import { gpuOrder } from '../../format'

export type Reservation = Schemas['Reservation']
/** A reservation as POST /reservations answers: with `warnings` (GPUs in use now). */
export type CreatedReservation = Schemas['CreatedReservation']

export interface GpuInfo {
  uuid: string
  host: string
  index: number
  name: string | null
  labels?: string[] // from the hardware: model=, memory=, arch=
}

/** Every GPU, by host then index. */
export async function loadGpus(): Promise<GpuInfo[]> {
  const answer = await unwrap(api.GET('/api/v1/gpus', {}))
  return answer.gpus
    .map((g) => ({ uuid: g.uuid, host: g.host, index: g.index, name: g.name ?? null, labels: g.labels ?? [] }))
    .sort(byHostIndex)
}

export function byHostIndex(a: { host: string; index: number | null }, b: { host: string; index: number | null }): number {
  return a.host.localeCompare(b.host, undefined, { numeric: true }) || gpuOrder(a.index) - gpuOrder(b.index)
}

/** Hosts with their GPUs, in order. */
export function groupByHost<T extends { host: string }>(gpus: T[]): { host: string; gpus: T[] }[] {
  const map = new Map<string, T[]>()
  for (const g of gpus) {
    if (!map.has(g.host)) map.set(g.host, [])
    map.get(g.host)!.push(g)
  }
  return [...map].map(([host, list]) => ({ host, gpus: list }))
}

/** Active reservations overlapping [start, end), on `gpus` when given (all pages, up to 10,000). */
export function loadReservations(start: Date, end: Date, gpus?: string[]): Promise<Reservation[]> {
  const range = { start: start.toISOString(), end: end.toISOString(), ...(gpus && gpus.length ? { gpus } : {}) }
  return fetchAllPages((page) => unwrap(api.GET('/api/v1/reservations', { params: { query: { ...range, ...page } } })), { max: 10_000 })
}

export function isMine(r: { owner: string }): boolean {
  return r.owner === session.user?.username
}

/** The owner or an admin. */
export function canManage(r: { owner: string }): boolean {
  return isMine(r) || session.isAdmin
}

export function isRunning(r: Reservation, now = new Date()): boolean {
  return r.status === 'active' && new Date(r.start) <= now && now < new Date(r.end)
}

export function hasStarted(r: Reservation, now = new Date()): boolean {
  return new Date(r.start) <= now
}
