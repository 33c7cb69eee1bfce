import { describe, expect, it } from 'vitest'
import { applyHostEvent, gpuModels, hostStatus, membershipChanges, type HostState } from './admin'

const host: HostState = {
  name: 'sim-001',
  labels: [],
  reachable: true,
  down_since: null,
  down_reason: null,
  last_seen: '2026-01-01T00:00:00Z',
  sampled_at: '2026-01-01T00:00:00Z',
  cpu_percent: 10,
  load_1m: 1,
  load_5m: 1,
  load_15m: 1,
  memory_used_mib: 100,
  memory_total_mib: 1000,
  gpu_status: 'ok',
  gpu_error: null,
  gpus: [],
}

describe('admin helpers', () => {
  it('diffs memberships', () => {
    expect(membershipChanges(['users', 'ml'], ['users', 'phd'])).toEqual({ add: ['phd'], remove: ['ml'] })
    expect(membershipChanges([], [])).toEqual({ add: [], remove: [] })
  })
  it('summarises GPU models', () => {
    expect(gpuModels([{ name: 'A100' }, { name: 'A100' }, { name: 'H100' }, { name: null }])).toBe('2 × A100, 1 × H100, 1 × unknown')
  })
  it('words host status', () => {
    expect(hostStatus({ reachable: null, gpu_status: null }).text).toBe('not polled yet')
    expect(hostStatus({ reachable: false, gpu_status: 'ok' })).toEqual({ tone: 'danger', text: 'unreachable' })
    expect(hostStatus({ reachable: true, gpu_status: 'no_nvidia_smi' })).toEqual({ tone: 'warn', text: 'no nvidia smi' })
    expect(hostStatus({ reachable: true, gpu_status: 'ok' }).tone).toBe('ok')
  })
  it('applies live host events', () => {
    const down = applyHostEvent(host, 'host.unreachable', { host: 'sim-001', since: '2026-01-01T01:00:00Z', reason: 'ssh: timed out' })
    expect(down).toMatchObject({ reachable: false, down_since: '2026-01-01T01:00:00Z', down_reason: 'ssh: timed out' })
    expect(host.reachable).toBe(true)
    const up = applyHostEvent(down, 'host.recovered', { host: 'sim-001', at: '2026-01-01T01:05:00Z' })
    expect(up).toMatchObject({ reachable: true, down_since: null, down_reason: null })
    const sampled = applyHostEvent(down, 'host.sampled', { host: 'sim-001', sampled_at: '2026-01-01T02:00:00Z', cpu_percent: 55, gpus: [] })
    expect(sampled).toMatchObject({ reachable: true, cpu_percent: 55, sampled_at: '2026-01-01T02:00:00Z', last_seen: '2026-01-01T02:00:00Z' })
    expect(sampled.gpus).toEqual([])
  })
})
