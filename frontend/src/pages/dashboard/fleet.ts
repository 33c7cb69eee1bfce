// The dashboard's model of the fleet: plain objects in plain Maps, never deeply reactive.
//
// Every host and GPU view is treated as immutable: an event builds new objects for what it
// changes and marks the host dirty; the page copies the dirty hosts into their shallowRefs once
// per flush, so only the cards whose object changed re-render. Nothing here touches Vue.
import type { Schemas } from '../../api/client'
import { gpuOrder } from '../../format'

export type Reservation = Schemas['Reservation']
export type Incident = Schemas['Incident']

export interface Proc {
  pid: number
  user: string | null
  command: string
  used_memory_mib: number | null
  started_at: string | null
}

/** An open violation, as far as a GPU card needs it. */
export interface ViolationMark {
  id: string
  gpu_uuid: string
  host: string
  gpu_index: number | null
  offender: string
  owner: string | null
  since: string
}

export const GPU_FIGURES = [
  'utilization_gpu_percent',
  'utilization_memory_percent',
  'memory_used_mib',
  'memory_total_mib',
  'temperature_c',
  'power_draw_w',
  'power_limit_w',
  'fan_speed_percent',
  'clock_sm_mhz',
  'clock_memory_mhz',
] as const
export type GpuFigure = (typeof GPU_FIGURES)[number]

export const HOST_FIGURES = [
  'cpu_percent',
  'load_1m',
  'load_5m',
  'load_15m',
  'memory_used_mib',
  'memory_total_mib',
] as const
export type HostFigure = (typeof HOST_FIGURES)[number]

/** A GPU's health (gpu.health_changed): failed GPUs are out of the pool until they read healthy. */
export type GpuHealth = {
  readonly state: 'ok' | 'degraded' | 'failed'
  readonly reason: string | null
  readonly since: string | null
}
export const HEALTHY: GpuHealth = { state: 'ok', reason: null, since: null }

export function asHealth(value: { state?: unknown; reason?: unknown; since?: unknown } | null | undefined): GpuHealth {
  const state = value?.state
  if (state !== 'degraded' && state !== 'failed') return HEALTHY
  return {
    state,
    reason: typeof value?.reason === 'string' ? value.reason : null,
    since: typeof value?.since === 'string' ? value.since : null,
  }
}

export type GpuView = {
  readonly uuid: string
  readonly host: string
  readonly index: number
  readonly name: string | null
  readonly processes: readonly Proc[]
  readonly reservation: Reservation | null
  readonly next_reservation: Reservation | null
  readonly sampled_at: string | null
  readonly violations: readonly ViolationMark[]
  readonly health: GpuHealth
} & { readonly [K in GpuFigure]: number | null }

export type HostView = {
  readonly name: string
  /** null: not polled yet */
  readonly reachable: boolean | null
  readonly down_since: string | null
  readonly down_reason: string | null
  readonly last_seen: string | null
  readonly sampled_at: string | null
  readonly gpu_status: string | null
  readonly gpu_error: string | null
  /** no sample for much longer than the host's interval, while thought reachable */
  readonly stale: boolean
  /** the GPU interconnect (`nvidia-smi topo -m`); null: not read yet, or no matrix */
  readonly topology?: Topology | null
  /** by index */
  readonly gpus: readonly GpuView[]
} & { readonly [K in HostFigure]: number | null }

export type Topology = Schemas['Topology']

/** The bus payloads the dashboard consumes (services/shared/contracts/). */
export interface GpuSampleData {
  uuid: string
  index: number
  name?: string | null
  [figure: string]: unknown
}
export interface HostSampledData {
  host: string
  sampled_at: string
  gpu_status?: string | null
  gpu_error?: string | null
  gpus: GpuSampleData[]
  [figure: string]: unknown
}
export interface ProcessesObservedData {
  host: string
  observed_at: string
  processes: (Proc & { gpu_uuid: string })[]
}
export interface ViolationData {
  incident_id: string
  host: string
  gpu_uuid: string
  gpu_index: number | null
  offender: string
  owner?: string | null
  since: string
}

/** A host is stale after this long without a sample, or 3 of its intervals if longer. */
export const STALE_AFTER_MS = 10_000

function num(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null
}

/** A reservation object, or null for null / `{}` (the API's "none"). */
export function asReservation(value: unknown): Reservation | null {
  if (!value || typeof value !== 'object' || !('id' in value)) return null
  return value as Reservation
}

function gpuFromState(state: Schemas['GpuState'], violations: readonly ViolationMark[]): GpuView {
  const figures = {} as Record<GpuFigure, number | null>
  for (const f of GPU_FIGURES) figures[f] = num(state[f])
  return {
    uuid: state.uuid,
    host: state.host,
    index: state.index,
    name: state.name ?? null,
    ...figures,
    processes: (state.processes ?? []).map((p) => ({
      pid: p.pid,
      user: p.user ?? null,
      command: p.command,
      used_memory_mib: p.used_memory_mib ?? null,
      started_at: p.started_at ?? null,
    })),
    reservation: asReservation(state.reservation),
    next_reservation: asReservation(state.next_reservation),
    sampled_at: state.sampled_at ?? null,
    violations,
    health: asHealth(state.health),
  }
}

function emptyGpu(host: string, uuid: string, index: number, name: string | null): GpuView {
  const figures = {} as Record<GpuFigure, number | null>
  for (const f of GPU_FIGURES) figures[f] = null
  return {
    uuid,
    host,
    index,
    name,
    ...figures,
    processes: [],
    reservation: null,
    next_reservation: null,
    sampled_at: null,
    violations: [],
    health: HEALTHY,
  }
}

function byIndex(a: GpuView, b: GpuView): number {
  return gpuOrder(a.index) - gpuOrder(b.index) || a.uuid.localeCompare(b.uuid)
}

function activeAt(r: Reservation, now: number): boolean {
  return r.status === 'active' && Date.parse(r.start) <= now && now < Date.parse(r.end)
}

export class Fleet {
  /** by host name */
  readonly hosts = new Map<string, HostView>()
  /** the names of the hosts changed since the last `takeDirty` */
  private dirty = new Set<string>()
  /** true when hosts came or went (the list itself must be redrawn) */
  membershipChanged = false
  /** open violations by id */
  readonly violations = new Map<string, ViolationMark>()
  /** GPU uuid -> host name */
  private hostOfGpu = new Map<string, string>()
  /** estimated sampling interval per host, ms */
  private interval = new Map<string, number>()

  /** Everything from the REST answers (GET /hosts and GET /violations?status=open). */
  load(hosts: readonly Schemas['HostState'][], incidents: readonly Incident[] = [], now = Date.now()): void {
    this.hosts.clear()
    this.hostOfGpu.clear()
    this.violations.clear()
    for (const i of incidents) {
      if (i.status !== 'open') continue
      this.violations.set(i.id, {
        id: i.id,
        gpu_uuid: i.gpu_uuid,
        host: i.host,
        gpu_index: i.gpu_index ?? null,
        offender: i.offender,
        owner: i.owner ?? null,
        since: i.since,
      })
    }
    const byGpu = this.violationsByGpu()
    for (const h of hosts) {
      const gpus = (h.gpus ?? []).map((g) => gpuFromState(g, byGpu.get(g.uuid) ?? [])).sort(byIndex)
      for (const g of gpus) this.hostOfGpu.set(g.uuid, h.name)
      const figures = {} as Record<HostFigure, number | null>
      for (const f of HOST_FIGURES) figures[f] = num(h[f])
      const view: HostView = {
        name: h.name,
        reachable: h.reachable ?? null,
        down_since: h.down_since ?? null,
        down_reason: h.down_reason ?? null,
        last_seen: h.last_seen ?? null,
        sampled_at: h.sampled_at ?? null,
        gpu_status: h.gpu_status ?? null,
        gpu_error: h.gpu_error ?? null,
        ...figures,
        stale: false,
        topology: h.topology && 'gpus' in h.topology ? (h.topology as Topology) : null,
        gpus,
      }
      this.hosts.set(h.name, { ...view, stale: this.isStale(view, now) })
      this.dirty.add(h.name)
    }
    this.membershipChanged = true
  }

  /** The names of the hosts changed since the last call (and forgets them). */
  takeDirty(): string[] {
    const names = [...this.dirty]
    this.dirty.clear()
    return names
  }

  get hasDirty(): boolean {
    return this.dirty.size > 0
  }

  hostOf(gpuUuid: string): string | undefined {
    return this.hostOfGpu.get(gpuUuid)
  }

  gpu(gpuUuid: string): GpuView | undefined {
    const host = this.hostOfGpu.get(gpuUuid)
    return host ? this.hosts.get(host)?.gpus.find((g) => g.uuid === gpuUuid) : undefined
  }

  private put(view: HostView): void {
    if (!this.hosts.has(view.name)) this.membershipChanged = true
    this.hosts.set(view.name, view)
    this.dirty.add(view.name)
  }

  private blankHost(name: string): HostView {
    const figures = {} as Record<HostFigure, number | null>
    for (const f of HOST_FIGURES) figures[f] = null
    return {
      name,
      reachable: null,
      down_since: null,
      down_reason: null,
      last_seen: null,
      sampled_at: null,
      gpu_status: null,
      gpu_error: null,
      ...figures,
      stale: false,
      gpus: [],
    }
  }

  private violationsByGpu(): Map<string, ViolationMark[]> {
    const map = new Map<string, ViolationMark[]>()
    for (const v of this.violations.values()) {
      const list = map.get(v.gpu_uuid)
      if (list) list.push(v)
      else map.set(v.gpu_uuid, [v])
    }
    return map
  }

  /** host.sampled: the host's figures and its GPUs'. */
  applySampled(data: HostSampledData, now = Date.now()): void {
    const old = this.hosts.get(data.host) ?? this.blankHost(data.host)
    if (old.sampled_at && Date.parse(data.sampled_at) < Date.parse(old.sampled_at)) return // late
    if (old.sampled_at) {
      const gap = Date.parse(data.sampled_at) - Date.parse(old.sampled_at)
      if (gap > 0) {
        const prev = this.interval.get(data.host)
        this.interval.set(data.host, prev ? prev * 0.7 + gap * 0.3 : gap)
      }
    }
    const samples = new Map<string, GpuSampleData>()
    for (const s of data.gpus ?? []) samples.set(s.uuid, s)
    const gpus: GpuView[] = []
    for (const g of old.gpus) {
      const s = samples.get(g.uuid)
      if (!s) {
        // In this sample no more: its figures are unknown now (shown as "—").
        if (g.sampled_at === null && g.utilization_gpu_percent === null) gpus.push(g)
        else {
          const blank = emptyGpu(g.host, g.uuid, g.index, g.name)
          gpus.push({ ...g, ...figuresOf(blank), sampled_at: g.sampled_at })
        }
        continue
      }
      samples.delete(g.uuid)
      gpus.push({ ...g, index: s.index, name: s.name ?? g.name, ...figuresOf(s), sampled_at: data.sampled_at })
    }
    if (samples.size) {
      const byGpu = this.violationsByGpu()
      for (const s of samples.values()) {
        const fresh = emptyGpu(data.host, s.uuid, s.index, s.name ?? null)
        gpus.push({ ...fresh, ...figuresOf(s), sampled_at: data.sampled_at, violations: byGpu.get(s.uuid) ?? [] })
        this.hostOfGpu.set(s.uuid, data.host)
      }
      gpus.sort(byIndex)
      this.membershipChanged = true
    }
    const figures = {} as Record<HostFigure, number | null>
    for (const f of HOST_FIGURES) figures[f] = num(data[f])
    const view: HostView = {
      ...old,
      ...figures,
      reachable: true,
      down_since: null,
      down_reason: null,
      sampled_at: data.sampled_at,
      last_seen: data.sampled_at,
      gpu_status: data.gpu_status ?? 'ok',
      gpu_error: data.gpu_error ?? null,
      gpus,
    }
    this.put({ ...view, stale: this.isStale(view, now) })
  }

  /** processes.observed: the whole truth of the host's GPU processes. */
  applyProcesses(data: ProcessesObservedData): void {
    const old = this.hosts.get(data.host)
    if (!old) return
    const byGpu = new Map<string, Proc[]>()
    for (const p of data.processes ?? []) {
      const proc: Proc = {
        pid: p.pid,
        user: p.user ?? null,
        command: p.command,
        used_memory_mib: p.used_memory_mib ?? null,
        started_at: p.started_at ?? null,
      }
      const list = byGpu.get(p.gpu_uuid)
      if (list) list.push(proc)
      else byGpu.set(p.gpu_uuid, [proc])
    }
    let changed = false
    const gpus = old.gpus.map((g) => {
      const procs = byGpu.get(g.uuid) ?? []
      if (sameProcesses(g.processes, procs)) return g
      changed = true
      return { ...g, processes: procs }
    })
    if (changed) this.put({ ...old, gpus })
  }

  /** host.topology_read */
  applyTopology(data: { host: string; topology: Topology | null }): void {
    const old = this.hosts.get(data.host)
    if (old) this.put({ ...old, topology: data.topology })
  }

  /** host.unreachable */
  applyUnreachable(data: { host: string; since: string; reason: string }): void {
    const old = this.hosts.get(data.host) ?? this.blankHost(data.host)
    this.put({ ...old, reachable: false, down_since: data.since, down_reason: data.reason, stale: false })
  }

  /** host.recovered */
  applyRecovered(data: { host: string; at: string }, now = Date.now()): void {
    const old = this.hosts.get(data.host) ?? this.blankHost(data.host)
    const view = { ...old, reachable: true, down_since: null, down_reason: null, last_seen: data.at }
    this.put({ ...view, stale: this.isStale(view, now) })
  }

  /** gpu.discovered */
  applyGpuDiscovered(data: { host: string; uuid: string; index: number; name?: string | null; memory_total_mib?: number | null }): void {
    const old = this.hosts.get(data.host) ?? this.blankHost(data.host)
    if (old.gpus.some((g) => g.uuid === data.uuid)) return
    const gpu = {
      ...emptyGpu(data.host, data.uuid, data.index, data.name ?? null),
      memory_total_mib: num(data.memory_total_mib),
      violations: this.violationsByGpu().get(data.uuid) ?? [],
    }
    this.hostOfGpu.set(data.uuid, data.host)
    this.membershipChanged = true
    this.put({ ...old, gpus: [...old.gpus, gpu].sort(byIndex) })
  }

  /** gpu.health_changed */
  applyGpuHealth(data: { host: string; uuid: string; state: string; reason?: string | null; since: string }): void {
    const old = this.hosts.get(data.host)
    if (!old || !old.gpus.some((g) => g.uuid === data.uuid)) return
    const health = asHealth(data)
    this.put({ ...old, gpus: old.gpus.map((g) => (g.uuid === data.uuid ? { ...g, health } : g)) })
  }

  /** gpu.disappeared */
  applyGpuDisappeared(data: { host: string; uuid: string }): void {
    const old = this.hosts.get(data.host)
    if (!old || !old.gpus.some((g) => g.uuid === data.uuid)) return
    this.hostOfGpu.delete(data.uuid)
    this.membershipChanged = true
    this.put({ ...old, gpus: old.gpus.filter((g) => g.uuid !== data.uuid) })
  }

  /** reservation.*: who holds the GPUs now (and next), until the REST answer reconciles it. */
  applyReservation(type: string, r: Reservation, now = Date.now()): void {
    const gone = type === 'reservation.cancelled' || type === 'reservation.ended' || r.status !== 'active'
    const current = !gone && activeAt(r, now)
    const future = !gone && r.status === 'active' && Date.parse(r.start) > now
    const listed = new Set((r.gpus ?? []).map((g) => g.uuid))
    // The GPUs that show it now, and those it names (rare events: a scan is fine).
    for (const host of [...this.hosts.values()]) {
      let changed = false
      const gpus = host.gpus.map((g) => {
        let next = g
        const named = listed.has(g.uuid)
        if (g.reservation?.id === r.id && (!current || !named)) next = { ...next, reservation: null }
        if (g.next_reservation?.id === r.id && (!future || !named)) next = { ...next, next_reservation: null }
        if (named && current) next = { ...next, reservation: r }
        if (named && future) {
          const n = next.next_reservation
          if (!n || n.id === r.id || Date.parse(r.start) < Date.parse(n.start)) next = { ...next, next_reservation: r }
        }
        if (next !== g) changed = true
        return next
      })
      if (changed) this.put({ ...host, gpus })
    }
  }

  /** violation.opened / escalated / resolved */
  applyViolation(type: string, data: ViolationData): void {
    const id = data.incident_id
    if (type === 'violation.resolved') {
      if (!this.violations.delete(id)) return
    } else {
      this.violations.set(id, {
        id,
        gpu_uuid: data.gpu_uuid,
        host: data.host,
        gpu_index: data.gpu_index ?? null,
        offender: data.offender,
        owner: data.owner ?? null,
        since: data.since,
      })
    }
    this.refreshViolations(data.host, data.gpu_uuid)
  }

  private refreshViolations(hostName: string, gpuUuid: string): void {
    const host = this.hosts.get(this.hostOfGpu.get(gpuUuid) ?? hostName)
    if (!host) return
    const marks = [...this.violations.values()].filter((v) => v.gpu_uuid === gpuUuid)
    this.put({ ...host, gpus: host.gpus.map((g) => (g.uuid === gpuUuid ? { ...g, violations: marks } : g)) })
  }

  /** Replace the reservations of every GPU with those of a fresh GET /gpus. */
  reconcileReservations(states: readonly Schemas['GpuState'][]): void {
    const byUuid = new Map(states.map((s) => [s.uuid, s]))
    for (const host of [...this.hosts.values()]) {
      let changed = false
      const gpus = host.gpus.map((g) => {
        const s = byUuid.get(g.uuid)
        if (!s) return g
        const reservation = asReservation(s.reservation)
        const next = asReservation(s.next_reservation)
        if (sameReservation(g.reservation, reservation) && sameReservation(g.next_reservation, next)) return g
        changed = true
        return { ...g, reservation, next_reservation: next }
      })
      if (changed) this.put({ ...host, gpus })
    }
  }

  /** The periodic check: staleness, and reservations whose end has passed. */
  tick(now = Date.now()): void {
    for (const host of [...this.hosts.values()]) {
      const stale = this.isStale(host, now)
      let changed = stale !== host.stale
      const gpus = host.gpus.map((g) => {
        if (g.reservation && Date.parse(g.reservation.end) <= now) {
          changed = true
          return { ...g, reservation: null }
        }
        return g
      })
      if (changed) this.put({ ...host, stale, gpus })
    }
  }

  isStale(host: HostView, now = Date.now()): boolean {
    if (host.reachable === false || !host.sampled_at) return false
    const limit = Math.max(STALE_AFTER_MS, 3 * (this.interval.get(host.name) ?? 0))
    return now - Date.parse(host.sampled_at) > limit
  }
}

function figuresOf(source: Record<string, unknown>): Record<GpuFigure, number | null> {
  const out = {} as Record<GpuFigure, number | null>
  for (const f of GPU_FIGURES) out[f] = num(source[f])
  return out
}

function sameProcesses(a: readonly Proc[], b: readonly Proc[]): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) {
    const x = a[i]
    const y = b[i]
    if (x.pid !== y.pid || x.user !== y.user || x.command !== y.command || x.used_memory_mib !== y.used_memory_mib)
      return false
  }
  return true
}

function sameReservation(a: Reservation | null, b: Reservation | null): boolean {
  if (!a || !b) return a === b
  return a.id === b.id && a.end === b.end && a.start === b.start && a.owner === b.owner && a.status === b.status
}

// --- filtering and grouping -----------------------------------------------------------------

/** The users of a GPU: its processes' and its holder's. */
export function usersOf(gpu: GpuView): string[] {
  const users = new Set<string>()
  for (const p of gpu.processes) if (p.user) users.add(p.user)
  if (gpu.reservation) users.add(gpu.reservation.owner)
  return [...users]
}

function gpuMatches(gpu: GpuView, term: string): boolean {
  if (gpu.name?.toLowerCase().includes(term)) return true
  if (`gpu ${gpu.index}` === term || `gpu${gpu.index}` === term) return true
  for (const p of gpu.processes) if (p.user?.toLowerCase().includes(term)) return true
  return gpu.reservation?.owner.toLowerCase().includes(term) ?? false
}

/**
 * The GPUs of `host` that the filter keeps: all of them when the host's name matches, else
 * those whose model or users match every word; null when the host is left out altogether.
 */
export function filterHost(host: HostView, query: string): readonly GpuView[] | null {
  const terms = query.toLowerCase().split(/\s+/).filter(Boolean)
  if (!terms.length) return host.gpus
  const name = host.name.toLowerCase()
  const rest = terms.filter((t) => !name.includes(t))
  if (!rest.length) return host.gpus
  const kept = host.gpus.filter((g) => rest.every((t) => gpuMatches(g, t)))
  return kept.length ? kept : null
}

export type GroupBy = 'prefix' | 'status' | 'model' | 'none'

export function hostStatus(host: HostView): 'unreachable' | 'stale' | 'waiting' | 'ok' {
  if (host.reachable === false) return 'unreachable'
  if (host.stale) return 'stale'
  if (host.reachable === null || !host.sampled_at) return 'waiting'
  return 'ok'
}

const STATUS_LABEL = { unreachable: 'Unreachable', stale: 'Stale', waiting: 'Not polled yet', ok: 'Reachable' }
const STATUS_ORDER = { unreachable: 0, stale: 1, waiting: 2, ok: 3 }

/** "gpu-node-12" -> "gpu-node": the name without its trailing number. */
export function namePrefix(name: string): string {
  const stripped = name.replace(/[-_.]?\d+$/, '')
  return stripped && stripped !== name ? stripped : name.split(/[-_.]/)[0] || name
}

export interface Group {
  key: string
  label: string
  hosts: string[]
}

const collator = new Intl.Collator(undefined, { numeric: true })

/** "node-2" before "node-10" */
export function natural(a: string, b: string): number {
  return collator.compare(a, b)
}

/** The host names in groups, each group and each group's hosts in a natural order. */
export function groupHosts(hosts: readonly HostView[], by: GroupBy): Group[] {
  const sorted = [...hosts].sort((a, b) => natural(a.name, b.name))
  if (by === 'none') return [{ key: 'all', label: 'All hosts', hosts: sorted.map((h) => h.name) }]
  const groups = new Map<string, Group>()
  const order = new Map<string, number>()
  for (const h of sorted) {
    let key: string
    let label: string
    if (by === 'status') {
      const s = hostStatus(h)
      key = s
      label = STATUS_LABEL[s]
      order.set(key, STATUS_ORDER[s])
    } else if (by === 'model') {
      key = h.gpus[0]?.name ?? 'No GPUs'
      label = key
    } else {
      key = namePrefix(h.name)
      label = key
    }
    const g = groups.get(key)
    if (g) g.hosts.push(h.name)
    else groups.set(key, { key, label, hosts: [h.name] })
  }
  return [...groups.values()].sort((a, b) =>
    by === 'status' ? (order.get(a.key) ?? 0) - (order.get(b.key) ?? 0) : natural(a.label, b.label),
  )
}
