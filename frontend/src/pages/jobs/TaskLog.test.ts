import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { flushPromises, mount } from '@vue/test-utils'
import { session } from '../../session'
import { nextLogDelay } from './jobModel'
import TaskLog from './TaskLog.vue'

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } })
}

const TASK = { index: 0, host: 'sim-001', gpus: ['GPU-a'], status: 'running', session: 'warden-3-0', run: 1, started_at: '2026-11-27T10:00:00Z' }
const DOWN = { error: 'host_unreachable', message: 'sim-001: connection refused', details: {} }

/** fetch answering the log route with `answer()`, counting the reads. */
function logServer(answer: () => Response) {
  const reads = { count: 0 }
  vi.stubGlobal('fetch', vi.fn(async () => {
    reads.count += 1
    return answer()
  }))
  return reads
}

async function advance(ms: number) {
  for (let t = 0; t < ms; t += 500) {
    await vi.advanceTimersByTimeAsync(500)
    await flushPromises()
  }
}

beforeEach(() => {
  vi.useFakeTimers()
  session.user = { username: 'alice', roles: ['user'] } as typeof session.user
  session.accessToken = 'token'
  session.refreshToken = 'refresh'
  session.accessExpiresAt = Date.now() + 3_600_000
})
afterEach(() => {
  vi.useRealTimers()
  vi.unstubAllGlobals()
  session.user = null
})

describe('a running task whose host is down', () => {
  it('backs off its reads and says once that the host does not answer', async () => {
    const reads = logServer(() => json(502, DOWN))
    const log = mount(TaskLog, { props: { jobId: 3, task: TASK } })
    await flushPromises()
    await advance(60_000)
    // every 2 s would be 31 reads in a minute; doubling waits: 0, 2, 6, 14, 30 s
    expect(reads.count).toBe(5)
    expect(log.findAll('[data-testid="host-down"]')).toHaveLength(1)
    expect(log.find('[data-testid="host-down"]').text()).toContain('sim-001 does not answer')
    expect(log.find('.notice.error').exists()).toBe(false)
  })

  it('reads every 2 s again once the host answers', async () => {
    let down = true
    const reads = logServer(() => (down ? json(502, DOWN) : json(200, { job_id: 3, task: 0, host: 'sim-001', session: 'warden-3-0', log: 'epoch 1' })))
    const log = mount(TaskLog, { props: { jobId: 3, task: TASK } })
    await advance(14_000) // reads at 0, 2, 6, 14 s
    down = false
    await advance(16_000) // the one at 30 s works
    const before = reads.count
    await advance(10_000)
    expect(reads.count - before).toBe(5)
    expect(log.find('[data-testid="host-down"]').exists()).toBe(false)
    expect(log.text()).toContain('epoch 1')
  })
})

describe('the attach hint', () => {
  it("tells an admin the session runs as the job's owner", async () => {
    logServer(() => json(200, { job_id: 3, task: 0, host: 'sim-001', session: 'warden-3-0', log: '' }))
    const log = mount(TaskLog, { props: { jobId: 3, task: TASK, owner: 'bob' } })
    await flushPromises()
    expect(log.find('.attach').text()).toContain("as bob (the job's owner)")
    expect(log.find('.attach').text()).not.toContain('as you')
  })
})

describe('nextLogDelay', () => {
  it('doubles after a failure up to a minute, and is 2 s after a success', () => {
    expect([2000, 4000, 32_000, 60_000].map((d) => nextLogDelay(d, true))).toEqual([4000, 8000, 60_000, 60_000])
    expect(nextLogDelay(60_000, false)).toBe(2000)
  })
})
