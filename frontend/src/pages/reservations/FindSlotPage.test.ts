import { afterEach, describe, expect, it, vi } from 'vitest'
import { flushPromises, mount } from '@vue/test-utils'
import { session } from '../../session'
import FindSlotPage from './FindSlotPage.vue'

vi.mock('vue-router', () => ({ useRouter: () => ({ push: vi.fn() }) }))

const A100 = ['model=A100', 'model=A100-80GB', 'memory=80GB', 'arch=ampere']
const GPUS = [
  { uuid: 'GPU-b', host: 'sim-002', index: 0, name: 'NVIDIA H100', labels: ['model=H100', 'arch=hopper'] },
  { uuid: 'GPU-a', host: 'sim-001', index: 0, name: 'NVIDIA A100-SXM4-80GB', labels: A100 },
  { uuid: 'GPU-c', host: 'sim-001', index: 1, name: 'NVIDIA A100-SXM4-80GB', labels: A100 },
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
    expect(offered('Labels')).toEqual(['arch=ampere', 'arch=hopper', 'memory=80GB', 'model=A100', 'model=A100-80GB', 'model=H100'])
  })

  it('asks for a slot of GPUs carrying every label typed', async () => {
    session.user = { username: 'alice', roles: ['user'] } as typeof session.user
    session.accessToken = 'token'
    session.refreshToken = 'refresh'
    session.accessExpiresAt = Date.now() + 3_600_000
    const asked: string[] = []
    vi.stubGlobal(
      'fetch',
      vi.fn(async (request: Request) => {
        asked.push(request.url)
        const body = request.url.includes('/slot') ? { start: '2026-11-30T08:00:00Z', end: '2026-11-30T10:00:00Z', gpus: [] } : { gpus: GPUS }
        return new Response(JSON.stringify(body), { status: 200, headers: { 'Content-Type': 'application/json' } })
      }),
    )
    const page = mount(FindSlotPage)
    await flushPromises()
    await page.findAll('label').find((l) => l.text().startsWith('Labels'))!.get('input').setValue('model=A100-80GB, arch!=volta')
    await page.get('form.find').trigger('submit')
    await flushPromises()
    const slot = new URL(asked.find((u) => u.includes('/slot'))!)
    expect(slot.searchParams.getAll('labels')).toEqual(['model=A100-80GB', 'arch!=volta'])
  })
})
