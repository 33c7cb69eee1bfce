import { describe, expect, it } from 'vitest'
import { mount, RouterLinkStub } from '@vue/test-utils'
import type { Schemas } from '../../api/client'
import { Fleet } from './fleet'
import GpuCard from './GpuCard.vue'
import GpuRow from './GpuRow.vue'

const T0 = Date.now()

function gpu(extra: Partial<Schemas['GpuState']> = {}) {
  const fleet = new Fleet()
  const state = {
    uuid: 'GPU-1', host: 'sim-001', index: 3, name: 'NVIDIA A100-SXM4-80GB',
    utilization_gpu_percent: 88, utilization_memory_percent: null, memory_used_mib: 2048, memory_total_mib: 81920,
    temperature_c: null, power_draw_w: 300, power_limit_w: 400, fan_speed_percent: null, clock_sm_mhz: null, clock_memory_mhz: null,
    processes: [{ pid: 7, user: 'bob', command: 'python train.py', used_memory_mib: 1000, started_at: null }],
    reservation: null, next_reservation: null, reachable: true, sampled_at: new Date(T0).toISOString(),
    ...extra,
  } as Schemas['GpuState']
  const host = {
    name: 'sim-001', reachable: true, down_since: null, down_reason: null, last_seen: null, sampled_at: null,
    cpu_percent: null, load_1m: null, load_5m: null, load_15m: null, memory_used_mib: null, memory_total_mib: null,
    gpu_status: 'ok', gpu_error: null, gpus: [state],
  } as Schemas['HostState']
  fleet.load([host], [], T0)
  return { fleet, view: () => fleet.hosts.get('sim-001')!.gpus[0] }
}

const stubs = { RouterLink: RouterLinkStub }

describe('GpuCard', () => {
  it('carries the hooks and the figures, with — for what is not reported', () => {
    const { view } = gpu()
    const w = mount(GpuCard, { props: { gpu: view(), me: 'alice' }, global: { stubs } })
    const card = w.get('[data-testid="gpu-card"]')
    expect(card.attributes('data-host')).toBe('sim-001')
    expect(card.attributes('data-index')).toBe('3')
    expect(card.text()).toContain('88%')
    expect(card.text()).toContain('bob')
    expect(card.text()).toContain('—') // temperature not reported
    expect(w.find('[data-testid="violation-badge"]').exists()).toBe(false)
  })

  it('shows the holder and until when, and a violation badge linked to it', async () => {
    const end = new Date(T0 + 3_600_000).toISOString()
    const { fleet, view } = gpu({
      reservation: { id: 1, owner: 'alice', start: new Date(T0 - 1000).toISOString(), end, gpus: [], guests: [], status: 'active', title: '', description: '', created_by: 'alice' } as never,
    })
    fleet.applyViolation('violation.opened', { incident_id: 'inc-9', host: 'sim-001', gpu_uuid: 'GPU-1', gpu_index: 3, offender: 'bob', owner: 'alice', since: end })
    const w = mount(GpuCard, { props: { gpu: view(), me: 'alice' }, global: { stubs } })
    expect(w.text()).toContain('alice')
    expect(w.text()).toMatch(/until \S+/)
    const badge = w.get('[data-testid="violation-badge"]')
    expect(badge.text()).toContain('Violation')
    expect(w.getComponent(RouterLinkStub).props('to')).toBe('/violations/inc-9')
  })

  it('asks for a chart of its utilisation', async () => {
    const { view } = gpu()
    const w = mount(GpuCard, { props: { gpu: view() }, global: { stubs } })
    await w.get('button').trigger('click')
    expect(w.emitted('chart')![0][0]).toMatchObject({ uuid: 'GPU-1' })
  })
})

describe('GpuRow', () => {
  it('carries the same hooks', () => {
    const { view } = gpu()
    const w = mount({ components: { GpuRow }, template: '<table><tbody><GpuRow :gpu="g" /></tbody></table>', data: () => ({ g: view() }) }, { global: { stubs } })
    const row = w.get('[data-testid="gpu-card"]')
    expect(row.attributes('data-index')).toBe('3')
    expect(row.text()).toContain('88%')
    expect(row.text()).toContain('bob')
  })
})

describe('a GPU nobody booked', () => {
  it('says "Not reserved", not "Free", when it is 88 % busy (card and row)', () => {
    const { view } = gpu()
    const card = mount(GpuCard, { props: { gpu: view(), me: 'alice' }, global: { stubs } })
    const row = mount({ components: { GpuRow }, template: '<table><tbody><GpuRow :gpu="g" /></tbody></table>', data: () => ({ g: view() }) }, { global: { stubs } })
    for (const w of [card, row]) {
      expect(w.text()).toContain('Not reserved')
      expect(w.text()).not.toMatch(/\bFree\b/)
    }
  })
})

describe('GPU health badge', () => {
  it('says a GPU failed and why, and nothing for a healthy one', () => {
    const since = new Date(T0).toISOString()
    const { view } = gpu({ health: { state: 'failed', reason: '2 uncorrectable ECC error(s)', since } })
    const card = mount(GpuCard, { props: { gpu: view() }, global: { stubs } })
    expect(card.get('[data-testid="health-badge"]').text()).toBe('Failed: out of the pool')
    expect(card.text()).toContain('2 uncorrectable ECC error(s)')
    const row = mount(GpuRow, { props: { gpu: view() }, global: { stubs } })
    expect(row.get('[data-testid="health-badge"]').text()).toBe('Failed')
    const healthy = mount(GpuCard, { props: { gpu: gpu().view() }, global: { stubs } })
    expect(healthy.find('[data-testid="health-badge"]').exists()).toBe(false)
  })
})
