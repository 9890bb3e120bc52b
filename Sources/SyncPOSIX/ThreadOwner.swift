#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The one thread a single-threaded object belongs to, checked in debug builds.
///
/// As swift-nio's `EventLoop.preconditionInEventLoop()`: the owner claims the object when it
/// starts driving it (``claim()``), and each entry point calls ``check(_:)``. A call from any
/// other thread stops a debug build at once, naming the entry point; a release build stores
/// nothing and checks nothing. Before it is claimed, any thread passes (an object is built on
/// one thread and handed to another, or driven by a test on its own thread).
public struct ThreadOwner: Sendable {
    #if DEBUG
    /// The owning thread's `pthread_t`, as a number, once claimed.
    private var owner: UInt?
    #endif

    /// An object no thread has claimed yet.
    public init() {}

    /// Makes the calling thread the owner.
    public mutating func claim() {
        #if DEBUG
        owner = Self.current
        #endif
    }

    /// Stops a debug build when the calling thread is not the owner.
    ///
    /// - Parameter entryPoint: The entry point called, for the message.
    @inlinable
    public func check(_ entryPoint: StaticString = #function) {
        #if DEBUG
        checkOwner(entryPoint)
        #endif
    }

    #if DEBUG
    /// The calling thread's `pthread_t`, as a number (a pointer on Darwin).
    private static var current: UInt {
        #if canImport(Darwin)
        UInt(bitPattern: pthread_self())
        #else
        UInt(pthread_self())
        #endif
    }

    @usableFromInline
    func checkOwner(_ entryPoint: StaticString) {
        guard let owner else { return }
        precondition(owner == Self.current,
                     "\(entryPoint) was called from a thread that does not own this object (only its loop thread may call it)")
    }
    #endif
}
