import { describe, expect, it } from 'vitest'
import type { Schemas } from '../../api/client'
import { Fleet, filterHost, groupHosts, namePrefix, hostStatus, usersOf, type HostView } from './fleet'

const T0 = Date.parse('2026-01-05T10:00:00Z')
const iso = (ms: number) => new Date(ms).toISOString()

function gpuState(host: string, index: number, extra: Partial<Schemas['GpuState']> = {}): Schemas['GpuState'] {
  return {
    uuid: `GPU-${host}-${index}`,
    host,
    index,
    name: 'NVIDIA A100-SXM4-80GB',
    utilization_gpu_percent: 50,
    utilization_memory_percent: 20,
    memory_used_mib: 1000,
    memory_total_mib: 81920,
    temperature_c: 50,
    power_draw_w: 200,
    power_limit_w: 400,
    fan_speed_percent: null,
    clock_sm_mhz: 1400,
    clock_memory_mhz: 1600,
    processes: [],
    reservation: null,
    next_reservation: null,
    reachable: true,
    sampled_at: iso(T0),
    present: true,
    health: { state: 'ok', reason: null, since: null },
    ...extra,
  }
}

function hostState(name: string, gpus = 2, extra: Partial<Schemas['HostState']> = {}): Schemas['HostState'] {
  return {
    name,
    labels: [],
    reachable: true,
    down_since: null,
    down_reason: null,
    last_seen: iso(T0),
    sampled_at: iso(T0),
    cpu_percent: 10,
    load_1m: 1,
    load_5m: 1,
    load_15m: 1,
    memory_used_mib: 1000,
    memory_total_mib: 8000,
    gpu_status: 'ok',
    gpu_error: null,
    gpus: Array.from({ length: gpus }, (_, i) => gpuState(name, i)),
    ...extra,
  }
}

function reservation(id: number, gpus: string[], start: number, end: number, extra: Record<string, unknown> = {}) {
  return {
    id,
    owner: 'alice',
    gpus: gpus.map((uuid) => ({ uuid, host: 'h1', index: 0 })),
    start: iso(start),
    end: iso(end),
    title: 't',
    description: '',
    status: 'active',
    created_by: 'alice',
    guests: [],
    ...extra,
  } as unknown as Schemas['Reservation']
}

function loaded(): Fleet {
  const fleet = new Fleet()
  fleet.load([hostState('h1'), hostState('h2')], [], T0)
  fleet.takeDirty()
  fleet.membershipChanged = false
  return fleet
}

describe('Fleet', () => {
  it('loads hosts with GPUs by index and marks them dirty', () => {
    const fleet = new Fleet()
    const h = hostState('h1', 0)
    h.gpus = [gpuState('h1', 1), gpuState('h1', 0)]
    fleet.load([h], [], T0)
    expect(fleet.takeDirty()).toEqual(['h1'])
    expect(fleet.hosts.get('h1')!.gpus.map((g) => g.index)).toEqual([0, 1])
    expect(fleet.membershipChanged).toBe(true)
    expect(fleet.hostOf('GPU-h1-1')).toBe('h1')
  })

  it('treats {} as no reservation', () => {
    const fleet = new Fleet()
    fleet.load([hostState('h1', 1, { gpus: [gpuState('h1', 0, { reservation: {} as never })] })], [], T0)
    expect(fleet.hosts.get('h1')!.gpus[0].reservation).toBeNull()
  })

  it('applies a sample: new objects for the changed host only, nulls kept as null', () => {
    const fleet = loaded()
    const before1 = fleet.hosts.get('h1')!
    const before2 = fleet.hosts.get('h2')!
    fleet.applySampled(
      {
        host: 'h1',
        sampled_at: iso(T0 + 2000),
        cpu_percent: 55,
        gpus: [
          { uuid: 'GPU-h1-0', index: 0, utilization_gpu_percent: 97, temperature_c: null },
          { uuid: 'GPU-h1-1', index: 1, utilization_gpu_percent: 3 },
        ],
      },
      T0 + 2000,
    )
    expect(fleet.takeDirty()).toEqual(['h1'])
    const after = fleet.hosts.get('h1')!
    expect(after).not.toBe(before1)
    expect(fleet.hosts.get('h2')).toBe(before2)
    expect(after.cpu_percent).toBe(55)
    expect(after.load_1m).toBeNull()
    expect(after.gpus[0].utilization_gpu_percent).toBe(97)
    expect(after.gpus[0].temperature_c).toBeNull()
    expect(after.gpus[0].sampled_at).toBe(iso(T0 + 2000))
    expect(fleet.membershipChanged).toBe(false)
  })

  it('ignores a sample older than the one it has', () => {
    const fleet = loaded()
    fleet.applySampled({ host: 'h1', sampled_at: iso(T0 - 5000), gpus: [] })
    expect(fleet.takeDirty()).toEqual([])
  })

  it('adds a GPU first seen in a sample, and blanks one missing from it', () => {
    const fleet = loaded()
    fleet.applySampled({ host: 'h1', sampled_at: iso(T0 + 2000), gpus: [{ uuid: 'GPU-new', index: 2, name: 'H100' }] }, T0 + 2000)
    const gpus = fleet.hosts.get('h1')!.gpus
    expect(gpus.map((g) => g.uuid)).toEqual(['GPU-h1-0', 'GPU-h1-1', 'GPU-new'])
    expect(gpus[0].utilization_gpu_percent).toBeNull()
    expect(fleet.membershipChanged).toBe(true)
    expect(fleet.hostOf('GPU-new')).toBe('h1')
  })

  it('a sample of a host it did not know adds the host', () => {
    const fleet = loaded()
    fleet.applySampled({ host: 'h9', sampled_at: iso(T0), gpus: [{ uuid: 'G9', index: 0 }] }, T0)
    expect(fleet.hosts.get('h9')!.gpus).toHaveLength(1)
    expect(fleet.membershipChanged).toBe(true)
  })

  it('applies processes as the whole truth, keeping unchanged GPUs as they were', () => {
    const fleet = loaded()
    fleet.applyProcesses({
      host: 'h1',
      observed_at: iso(T0),
      processes: [{ gpu_uuid: 'GPU-h1-0', pid: 1, user: 'bob', command: 'python x', used_memory_mib: 10, started_at: null }],
    })
    const one = fleet.hosts.get('h1')!
    expect(one.gpus[0].processes.map((p) => p.user)).toEqual(['bob'])
    const untouched = one.gpus[1]
    fleet.takeDirty()
    fleet.applyProcesses({
      host: 'h1',
      observed_at: iso(T0),
      processes: [{ gpu_uuid: 'GPU-h1-0', pid: 1, user: 'bob', command: 'python x', used_memory_mib: 10, started_at: null }],
    })
    expect(fleet.takeDirty()).toEqual([]) // nothing changed: nothing to redraw
    fleet.applyProcesses({ host: 'h1', observed_at: iso(T0), processes: [] })
    const two = fleet.hosts.get('h1')!
    expect(two.gpus[0].processes).toEqual([])
    expect(two.gpus[1]).toBe(untouched)
  })

  it('marks a host unreachable with its reason and since when, and recovered', () => {
    const fleet = loaded()
    fleet.applyUnreachable({ host: 'h2', since: iso(T0 + 1000), reason: 'ssh: connection refused' })
    let h = fleet.hosts.get('h2')!
    expect(h.reachable).toBe(false)
    expect(h.down_reason).toBe('ssh: connection refused')
    expect(hostStatus(h)).toBe('unreachable')
    fleet.applyRecovered({ host: 'h2', at: iso(T0 + 5000) }, T0 + 5000)
    h = fleet.hosts.get('h2')!
    expect(h.reachable).toBe(true)
    expect(h.down_reason).toBeNull()
  })

  it('turns stale without samples, and fresh again with one', () => {
    const fleet = loaded()
    fleet.tick(T0 + 5000)
    expect(fleet.takeDirty()).toEqual([])
    fleet.tick(T0 + 11_000)
    expect(fleet.takeDirty().sort()).toEqual(['h1', 'h2'])
    expect(fleet.hosts.get('h1')!.stale).toBe(true)
    expect(hostStatus(fleet.hosts.get('h1')!)).toBe('stale')
    fleet.applySampled({ host: 'h1', sampled_at: iso(T0 + 11_500), gpus: [] }, T0 + 11_600)
    expect(fleet.hosts.get('h1')!.stale).toBe(false)
  })

  it('an unreachable host is not called stale', () => {
    const fleet = loaded()
    fleet.applyUnreachable({ host: 'h1', since: iso(T0), reason: 'timeout' })
    fleet.tick(T0 + 60_000)
    expect(fleet.hosts.get('h1')!.stale).toBe(false)
  })

  it('adds and removes GPUs on gpu.discovered / gpu.disappeared', () => {
    const fleet = loaded()
    fleet.applyGpuDiscovered({ host: 'h1', uuid: 'GPU-x', index: 5, name: 'H100', memory_total_mib: 1024 })
    expect(fleet.hosts.get('h1')!.gpus.at(-1)!.memory_total_mib).toBe(1024)
    fleet.applyGpuDisappeared({ host: 'h1', uuid: 'GPU-x' })
    expect(fleet.hosts.get('h1')!.gpus.map((g) => g.uuid)).not.toContain('GPU-x')
  })

  it('shows a reservation that holds a GPU now, and clears it when cancelled or ended', () => {
    const fleet = loaded()
    const r = reservation(7, ['GPU-h1-1'], T0 - 1000, T0 + 3_600_000)
    fleet.applyReservation('reservation.started', r, T0)
    expect(fleet.hosts.get('h1')!.gpus[1].reservation?.id).toBe(7)
    expect(fleet.hosts.get('h1')!.gpus[0].reservation).toBeNull()
    // moved to the other GPU
    fleet.applyReservation('reservation.updated', reservation(7, ['GPU-h1-0'], T0 - 1000, T0 + 3_600_000), T0)
    expect(fleet.hosts.get('h1')!.gpus[1].reservation).toBeNull()
    expect(fleet.hosts.get('h1')!.gpus[0].reservation?.id).toBe(7)
    fleet.applyReservation('reservation.cancelled', { ...r, status: 'cancelled' } as never, T0)
    expect(fleet.hosts.get('h1')!.gpus[0].reservation).toBeNull()
  })

  it('a future reservation is the next one, and the earliest wins', () => {
    const fleet = loaded()
    fleet.applyReservation('reservation.created', reservation(1, ['GPU-h1-0'], T0 + 7_200_000, T0 + 9_000_000), T0)
    fleet.applyReservation('reservation.created', reservation(2, ['GPU-h1-0'], T0 + 3_600_000, T0 + 5_000_000), T0)
    fleet.applyReservation('reservation.created', reservation(3, ['GPU-h1-0'], T0 + 8_000_000, T0 + 9_000_000), T0)
    const g = fleet.hosts.get('h1')!.gpus[0]
    expect(g.reservation).toBeNull()
    expect(g.next_reservation?.id).toBe(2)
  })

  it('drops a reservation whose end has passed on tick', () => {
    const fleet = loaded()
    fleet.applyReservation('reservation.started', reservation(7, ['GPU-h1-1'], T0 - 1000, T0 + 4000), T0)
    fleet.applySampled({ host: 'h1', sampled_at: iso(T0 + 4500), gpus: [] }, T0 + 4500)
    fleet.tick(T0 + 5000)
    expect(fleet.hosts.get('h1')!.gpus[1].reservation).toBeNull()
  })

  it('reconciles reservations from GET /gpus', () => {
    const fleet = loaded()
    const r = reservation(9, ['GPU-h2-0'], T0 - 1000, T0 + 1000)
    fleet.reconcileReservations([gpuState('h2', 0, { reservation: r }), gpuState('h2', 1)])
    expect(fleet.takeDirty()).toEqual(['h2'])
    expect(fleet.hosts.get('h2')!.gpus[0].reservation?.id).toBe(9)
    fleet.reconcileReservations([gpuState('h2', 0, { reservation: r }), gpuState('h2', 1)])
    expect(fleet.takeDirty()).toEqual([])
  })

  it('shows open violations live and drops them when resolved', () => {
    const fleet = loaded()
    const v = { incident_id: 'abc', host: 'h2', gpu_uuid: 'GPU-h2-1', gpu_index: 1, offender: 'bob', owner: 'alice', since: iso(T0) }
    fleet.applyViolation('violation.opened', v)
    expect(fleet.takeDirty()).toEqual(['h2'])
    expect(fleet.hosts.get('h2')!.gpus[1].violations.map((x) => x.id)).toEqual(['abc'])
    fleet.applyViolation('violation.escalated', v)
    expect(fleet.hosts.get('h2')!.gpus[1].violations).toHaveLength(1)
    fleet.applyViolation('violation.resolved', v)
    expect(fleet.hosts.get('h2')!.gpus[1].violations).toEqual([])
    expect(fleet.violations.size).toBe(0)
  })

  it('loads open incidents onto their GPUs', () => {
    const fleet = new Fleet()
    const incident = { id: 'i1', status: 'open', host: 'h1', gpu_uuid: 'GPU-h1-0', gpu_index: 0, offender: 'eve', owner: null, since: iso(T0) }
    fleet.load([hostState('h1')], [incident as unknown as Schemas['Incident']], T0)
    expect(fleet.hosts.get('h1')!.gpus[0].violations[0].offender).toBe('eve')
  })
})

describe('filtering and grouping', () => {
  function view(name: string, users: string[][] = [], model = 'NVIDIA A100'): HostView {
    const fleet = new Fleet()
    const h = hostState(name, users.length || 1)
    h.gpus = h.gpus.map((g, i) => ({
      ...g,
      name: model,
      processes: (users[i] ?? []).map((u, pid) => ({ pid, user: u, command: 'x', used_memory_mib: null, started_at: null })),
    }))
    fleet.load([h], [], T0)
    return fleet.hosts.get(name)!
  }

  it('keeps every GPU of a host whose name matches', () => {
    const h = view('gpu-node-01', [['bob'], []])
    expect(filterHost(h, '')).toHaveLength(2)
    expect(filterHost(h, 'NODE-01')).toHaveLength(2)
  })

  it('keeps the GPUs whose users or model match', () => {
    const h = view('n1', [['bob'], ['alice'], []])
    expect(filterHost(h, 'ali')!.map((g) => g.index)).toEqual([1])
    expect(filterHost(h, 'a100')).toHaveLength(3)
    expect(filterHost(h, 'n1 bob')!.map((g) => g.index)).toEqual([0])
    expect(filterHost(h, 'zed')).toBeNull()
  })

  it('matches the holder of a reservation', () => {
    const fleet = new Fleet()
    const r = reservation(1, ['GPU-n1-0'], T0 - 1, T0 + 1, { owner: 'carol' })
    fleet.load([hostState('n1', 1, { gpus: [gpuState('n1', 0, { reservation: r })] })], [], T0)
    const h = fleet.hosts.get('n1')!
    expect(filterHost(h, 'carol')).toHaveLength(1)
    expect(usersOf(h.gpus[0])).toEqual(['carol'])
  })

  it('takes the name prefix', () => {
    expect(namePrefix('gpu-node-12')).toBe('gpu-node')
    expect(namePrefix('sim-001')).toBe('sim')
    expect(namePrefix('dgx3')).toBe('dgx')
    expect(namePrefix('login')).toBe('login')
  })

  it('groups by name prefix in natural order', () => {
    const hosts = ['b-10', 'b-2', 'a-1'].map((n) => view(n))
    expect(groupHosts(hosts, 'prefix')).toEqual([
      { key: 'a', label: 'a', hosts: ['a-1'] },
      { key: 'b', label: 'b', hosts: ['b-2', 'b-10'] },
    ])
    expect(groupHosts(hosts, 'none')[0].hosts).toEqual(['a-1', 'b-2', 'b-10'])
  })

  it('groups by status with unreachable hosts first', () => {
    const fleet = new Fleet()
    fleet.load([hostState('x1'), hostState('x2')], [], T0)
    fleet.applyUnreachable({ host: 'x2', since: iso(T0), reason: 'timeout' })
    const groups = groupHosts([...fleet.hosts.values()], 'status')
    expect(groups.map((g) => g.label)).toEqual(['Unreachable', 'Reachable'])
  })

  it('groups by GPU model', () => {
    const groups = groupHosts([view('a', [[]], 'H100'), view('b', [[]], 'A100')], 'model')
    expect(groups.map((g) => g.key)).toEqual(['A100', 'H100'])
  })
})

describe('GPU health', () => {
  it('comes from the hosts answer and from gpu.health_changed, ok when not said', () => {
    const fleet = new Fleet()
    const failed = { state: 'failed', reason: 'row remapping pending', since: iso(T0) }
    fleet.load([hostState('h1', 0, { gpus: [gpuState('h1', 0, { health: failed }), gpuState('h1', 1)] })], [], T0)
    const health = () => fleet.hosts.get('h1')!.gpus.map((g) => g.health.state)
    expect(health()).toEqual(['failed', 'ok'])
    fleet.takeDirty()
    fleet.applyGpuHealth({ host: 'h1', uuid: 'GPU-h1-1', state: 'degraded', reason: 'PCIe link x8 of x16', since: iso(T0) })
    fleet.applyGpuHealth({ host: 'h1', uuid: 'GPU-h1-0', state: 'ok', reason: null, since: iso(T0) })
    expect(health()).toEqual(['ok', 'degraded'])
    expect(fleet.hosts.get('h1')!.gpus[1].health.reason).toBe('PCIe link x8 of x16')
    expect(fleet.takeDirty()).toEqual(['h1'])
    fleet.applyGpuHealth({ host: 'nowhere', uuid: 'GPU-x', state: 'failed', since: iso(T0) })
    expect(fleet.hasDirty).toBe(false)
  })
})
