import { afterEach, describe, expect, it, vi } from 'vitest'
import { flushPromises, mount } from '@vue/test-utils'
import { session } from '../../session'
import FindSlotPage from './FindSlotPage.vue'

vi.mock('vue-router', () => ({ useRouter: () => ({ push: vi.fn() }) }))

const GPUS = [
  { uuid: 'GPU-b', host: 'sim-002', index: 0, name: 'NVIDIA H100' },
  { uuid: 'GPU-a', host: 'sim-001', index: 0, name: 'NVIDIA A100-SXM4-80GB' },
  { uuid: 'GPU-c', host: 'sim-001', index: 1, name: 'NVIDIA A100-SXM4-80GB' },
]

afterEach(() => {
  vi.unstubAllGlobals()
  session.user = null
})

describe('Find GPUs', () => {
  it('offers the known hosts and GPU models in its fields', async () => {
    session.user = { username: 'alice', roles: ['user'] } as typeof session.user
    session.accessToken = 'token'
    session.refreshToken = 'refresh'
    session.accessExpiresAt = Date.now() + 3_600_000
    vi.stubGlobal('fetch', vi.fn(async () => new Response(JSON.stringify({ gpus: GPUS }), { status: 200, headers: { 'Content-Type': 'application/json' } })))
    const page = mount(FindSlotPage)
    await flushPromises()
    const offered = (label: string) => {
      const input = page.findAll('label').find((l) => l.text().startsWith(label))!.get('input')
      return page.get(`datalist#${input.attributes('list')}`).findAll('option').map((o) => o.attributes('value'))
    }
    expect(offered('Host')).toEqual(['sim-001', 'sim-002'])
    expect(offered('GPU model')).toEqual(['NVIDIA A100-SXM4-80GB', 'NVIDIA H100'])
  })
})
