import { describe, expect, it } from 'vitest'
import { ref } from 'vue'
import { ApiError } from './api/client'
import { useAction } from './action'

/** A promise settled from outside, to look at the state while a run is under way. */
function deferred() {
  let resolve!: () => void
  let reject!: (err: unknown) => void
  const promise = new Promise<void>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

const refused = new ApiError(409, 'reservation_conflict', 'GPU taken')

describe('useAction', () => {
  it('is busy while the work runs and clears the error when it succeeds', async () => {
    const { busy, error, run } = useAction()
    error.value = refused
    const call = deferred()
    const done = run(() => call.promise)
    expect(busy.value).toBe(true)
    expect(error.value).toBe(refused) // a reload keeps the last notice until it succeeds
    call.resolve()
    expect(await done).toBe(true)
    expect(busy.value).toBe(false)
    expect(error.value).toBeNull()
  })

  it('keeps what the work throws as the error, not thrown to the caller', async () => {
    const { busy, error, run } = useAction()
    expect(await run(() => Promise.reject(refused))).toBe(false)
    expect(error.value).toBe(refused)
    expect(busy.value).toBe(false)
  })

  it('hides the last error when a new try starts, if asked', async () => {
    const { error, run } = useAction({ clearErrorOnStart: true })
    error.value = refused
    const call = deferred()
    const done = run(() => call.promise)
    expect(error.value).toBeNull()
    call.reject(refused)
    await done
    expect(error.value).toBe(refused)
  })

  it('lets only the latest of overlapping runs report, if asked', async () => {
    const { busy, error, run } = useAction({ latestOnly: true })
    const first = deferred()
    const second = deferred()
    const a = run(() => first.promise)
    const b = run(() => second.promise)
    first.reject(refused) // stale: neither its error nor its end shows
    await a
    expect(error.value).toBeNull()
    expect(busy.value).toBe(true)
    second.resolve()
    await b
    expect(busy.value).toBe(false)
  })

  it('tells the work whether a later run has started', async () => {
    const { run } = useAction({ latestOnly: true })
    const first = deferred()
    const seen: boolean[] = []
    const a = run(async (isLatest) => {
      await first.promise
      seen.push(isLatest())
    })
    const b = run(async (isLatest) => {
      seen.push(isLatest())
    })
    first.resolve()
    await Promise.all([a, b])
    expect(seen).toEqual([true, false])
  })

  it('reports every run by default, the first to end clearing the flag', async () => {
    const { busy, error, run } = useAction()
    const first = deferred()
    const a = run(() => first.promise)
    const b = run(() => Promise.reject(refused))
    await b
    expect(error.value).toBe(refused)
    expect(busy.value).toBe(false)
    first.resolve()
    await a
    expect(error.value).toBeNull()
  })

  it('shares a flag and an error given to it', async () => {
    const busy = ref(true)
    const error = ref<unknown>(null)
    const action = useAction({ busy, error })
    expect(action.busy).toBe(busy)
    await action.run(() => Promise.reject(refused))
    expect(busy.value).toBe(false)
    expect(error.value).toStrictEqual(refused)
  })
})
