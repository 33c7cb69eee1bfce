import { describe, expect, it } from 'vitest'
import { mount, RouterLinkStub } from '@vue/test-utils'
import type { Schemas } from '../../api/client'
import { Fleet } from './fleet'
import GpuCard from './GpuCard.vue'
import HostPanel from './HostPanel.vue'

const T0 = Date.now()

function state(uuid: string, index: number, name: string): Schemas['GpuState'] {
  return {
    uuid, host: 'sim-001', index, name,
    utilization_gpu_percent: null, utilization_memory_percent: null, memory_used_mib: 1024, memory_total_mib: 40192,
    temperature_c: null, power_draw_w: null, power_limit_w: null, fan_speed_percent: null, clock_sm_mhz: null, clock_memory_mhz: null,
    processes: [], reservation: null, next_reservation: null, reachable: true, sampled_at: new Date(T0).toISOString(),
    present: true, health: { state: 'ok', reason: null, since: null },
  } as Schemas['GpuState']
}

function fleetWithSplitGpu(): Fleet {
  const fleet = new Fleet()
  const host = {
    name: 'sim-001', reachable: true, down_since: null, down_reason: null, last_seen: null, sampled_at: null,
    cpu_percent: null, load_1m: null, load_5m: null, load_15m: null, memory_used_mib: null, memory_total_mib: null,
    gpu_status: 'ok', gpu_error: null,
    gpus: [
      state('MIG-b', 1001, 'NVIDIA A100-SXM4-80GB MIG 3g.40gb'),
      state('GPU-1', 1, 'NVIDIA A100-SXM4-80GB'),
      state('GPU-0', 0, 'NVIDIA A100-SXM4-80GB'),
      state('MIG-a', 1000, 'NVIDIA A100-SXM4-80GB MIG 3g.40gb'),
    ],
  } as Schemas['HostState']
  fleet.load([host], [], T0)
  return fleet
}

const stubs = { RouterLink: RouterLinkStub }

describe('a GPU split into MIG instances', () => {
  it('lists its instances right after it, named GPU 0/migN, and marks it split', () => {
    const fleet = fleetWithSplitGpu()
    const host = fleet.hosts.get('sim-001')!
    expect(host.gpus.map((g) => g.uuid)).toEqual(['GPU-0', 'MIG-a', 'MIG-b', 'GPU-1'])
    const w = mount(HostPanel, { props: { entry: { value: host } as never, query: '', layout: 'cards' }, global: { stubs } })
    const cards = w.findAll('[data-testid="gpu-card"]')
    expect(cards.map((c) => c.find('strong').text())).toEqual(['GPU 0', 'GPU 0/mig0', 'GPU 0/mig1', 'GPU 1'])
    expect(cards.map((c) => c.find('[data-testid="mig-split"]').exists())).toEqual([true, false, false, false])
  })

  it('an instance card says its profile', () => {
    const host = fleetWithSplitGpu().hosts.get('sim-001')!
    const w = mount(GpuCard, { props: { gpu: host.gpus[1] }, global: { stubs } })
    expect(w.text()).toContain('MIG 3g.40gb')
    expect(w.find('[data-testid="mig-split"]').exists()).toBe(false)
  })
})
